"""Attachment content on disk: one file per SHA-256 under settings.ATTACHMENTS_DIR.

A file is written to a temporary name, flushed and fsynced, hashed again from disk, then
renamed into place and the directory fsynced: a file under its SHA-256 name is always
complete and verified. The database row (AttachmentContent) is written only after that, and
removed before its file, so a row never names a missing file for long (the sweep's window).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

try:
    import fcntl
except ImportError:  # Windows: the thread lock alone (one broker process per data directory)
    fcntl = None  # type: ignore[assignment]

SHA256_PATTERN = re.compile(r"^[0-9a-f]{64}$")
_CHUNK = 1024 * 1024

LOCK_NAME = ".lock"
_thread_lock = threading.Lock()


@contextlib.contextmanager
def write_lock() -> Iterator[None]:
    """Held while a file is written and its row committed, and while a row is deleted and then
    its file: no upload of a hash commits between the sweep's check and its unlink.

    A thread lock for this process and, where the platform has it, an flock on
    `<attachments dir>/.lock` for the other processes of a scale-out on one volume.
    """
    with _thread_lock:
        folder = directory()
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / LOCK_NAME).open("a+b") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def directory() -> Path:
    return Path(settings.ATTACHMENTS_DIR)


def path_for(sha256: str) -> Path:
    if not SHA256_PATTERN.match(sha256):
        raise ValueError("not a lowercase SHA-256")
    return directory() / sha256


def digest_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def exists(sha256: str, size: int) -> bool:
    """A complete file is in place (its name promises its hash; the size is checked too)."""
    try:
        return path_for(sha256).stat().st_size == size
    except FileNotFoundError:
        return False


def _fsync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):  # some platforms cannot open a directory
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write(sha256: str, data: bytes) -> None:
    """Store `data` under its hash: temp -> fsync -> verify -> rename -> fsync the directory."""
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError("the bytes do not match their SHA-256")
    target = path_for(sha256)
    if exists(sha256, len(data)):
        return
    folder = directory()
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{sha256}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with temporary.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if digest_of_file(temporary) != sha256:
            raise OSError(f"the written copy of {sha256} does not match its hash")
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
    _fsync_directory(folder)


def read(sha256: str) -> bytes:
    return path_for(sha256).read_bytes()


def remove(sha256: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        path_for(sha256).unlink()


def free_bytes() -> int:
    """Free bytes on the attachments directory's volume (its nearest existing ancestor)."""
    place = directory()
    while not place.exists() and place != place.parent:
        place = place.parent
    return shutil.disk_usage(place).free
