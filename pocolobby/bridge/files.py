"""The local file rules: what the bridge may read for a send, and the places it may touch at
all (saving.py applies them to where a received copy may be saved).

The bridge runs with the agent's OS permissions and is the only part of PocoLobby that touches
the agent's disk. A confused or prompt-injected model could try to send secrets, so each path
of a send's `attachments` is checked here before a byte is read, and a refusal names the rule
it broke (`FileRefused.rule`). Only the model's own `attachments` argument reaches this module
(core.py); nothing a peer message or the broker names is ever read.

These rules limit what a confused model can send; they are not a sandbox against code that
runs as the same user, which can read those files anyway.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import string
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

from lobbies.wire.jsontext import JSONObject, JsonTooDeep, load_json, scalar_members
from lobbies.wire.media import IMAGE_MEDIA_TYPES

MIB = 1024 * 1024
IMAGE_LIMIT = 10 * MIB
DOCUMENT_LIMIT = 5 * MIB

# Images recognized by their magic bytes, whatever the file is called.
IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
# Documents by name, accepted only as valid UTF-8.
DOCUMENT_TYPES = {
    "md": "text/markdown",
    "txt": "text/plain",
    "csv": "text/csv",
    "json": "application/json",
    "log": "text/plain",
    "mjs": "text/javascript",
    "cjs": "text/javascript",
    "js": "text/javascript",
    "ts": "text/x-typescript",
    "py": "text/x-python",
    "sh": "text/x-shellscript",
    "swift": "text/x-swift",
}
IMAGE_TYPES = IMAGE_MEDIA_TYPES

# Rule names, as a refusal states them.
RULE_ONLY_ATTACHMENTS = "only the attachments argument"
RULE_ABSOLUTE = "absolute path"
RULE_PLACE = "home or temporary folder"
RULE_DOT = "no dotfiles or dot directories"
RULE_APP_DATA = "no application data"
RULE_CREDENTIAL_NAME = "no credential names"
RULE_CREDENTIAL_CONTENT = "no keys or tokens in text"
RULE_OWN_CONFIG = "never a PocoLobby configuration"
RULE_LINK = "links only within the same directory"
RULE_HARD_LINK = "no hard links"
RULE_TYPE = "allowed types only"
RULE_REGULAR = "a regular, non-empty file"
RULE_SIZE = "size limit"
RULE_NO_REPLACE = "never replace a file"
RULE_UNCHECKABLE = "a path that can be checked"

# Names that look like a credential (matched case-insensitively against each name below the
# home or temporary folder). Everyday names such as keyframe-panel.png or key-light.png pass.
_COMPOUND = r"(?:api|private|secret|access|ssh|auth|signing|encryption|master)"
CREDENTIAL_NAMES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^\.env",
        r"\.(?:pem|key|p12|pfx|ppk|jks|keystore)$",
        r"^keys?\.",
        _COMPOUND + r"[-_ .]?keys?(?![a-z])",
        r"key(?:store|chain|ring|file)",
        r"^id_",
        r"secret",
        r"credential",
        r"password",
        r"passwd",
    )
)

# What a key or token looks like inside a text file, whatever the file is called.
CREDENTIAL_CONTENT: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a private key block", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")),
    (
        "an OAuth token field",
        re.compile(r"""["']?\b(?:refresh_token|access_token|client_secret)\b["']?\s*[:=]"""),
    ),
    ("an AWS secret access key", re.compile(r"\baws_secret_access_key\b\s*[:=]", re.I)),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}")),
    ("a GitHub token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("an Anthropic key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{8,}")),
    ("a Slack token", re.compile(r"\bxox[abps]-[A-Za-z0-9-]{8,}")),
    # An agent token (lobbies/access/tokens.py) or the admin token (lobbies/access/secret_files.py).
    ("a PocoLobby token", re.compile(r"\bpl[at]_[A-Za-z0-9_-]{32,}")),
)

# A secret given a value: `Access_Token = x`, `password: hunter2` (YAML), `"api_key": "…"`,
# `export DB_PASSWORD=…`, in any case and with `_`, `-` or nothing between the words. Which
# values are no secret is decided by `_secret_value`.
_GUARDED_WORDS = (
    r"(?:token|secret|password|passwd|passphrase"
    r"|(?:api|secret|private|access|auth|signing|encryption|master)[-_]?key)"
)
# Matched in text lowered (ASCII only, so offsets stay): case-insensitive matching was
# slower (docs/PERFORMANCE.md, "Figures from code comments").
SECRET_ASSIGNMENT = re.compile(
    r"(?=[tspaem])(?P<word>" + _GUARDED_WORDS + r")" + r"""["']?[ \t]*(?::=|=>|=|:)(?!=)[ \t]*"""
    r"""(?P<value>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`\n]*`|[^\s,;#}\])]+)"""
)
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# A character of a name, read backwards from a guarded word (`DB_` of `DB_PASSWORD`).
_NAME_CHAR = re.compile(r"[A-Za-z0-9_.-]")
# Unquoted values that name a type or a constant, not a secret (`password: str`).
_NOT_SECRETS = frozenset(
    {"str", "string", "bytes", "int", "number", "bool", "boolean", "any", "none", "null"}
    | {"nil", "undefined", "true", "false", "optional", "secretstr", "required", "yes", "no"}
)


class FileRefused(Exception):
    """A path broke a local file rule: `rule` names it, the message says what and why."""

    def __init__(self, rule: str, path: str, reason: str) -> None:
        super().__init__(f"{path}: refused by the rule '{rule}': {reason}")
        self.rule = rule
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class FileIdentity:
    """A file as the kernel knows it: device and inode (hard links share them)."""

    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> FileIdentity | None:
        """The resolved path and identity of an existing file, or None."""
        try:
            resolved = os.path.realpath(path)
            st = os.stat(resolved)
        except OSError:
            return None
        return cls(resolved, st.st_dev, st.st_ino)


@dataclass(frozen=True)
class Places:
    """Where files may be read and saved: the home directory and the system temporary folders,
    plus the bridge's own configuration file, which is never read."""

    home: Path
    temp_dirs: tuple[Path, ...]
    own_config: FileIdentity | None = None

    @classmethod
    def current(cls, own_config: FileIdentity | None = None) -> Places:
        """This process's home (HOME, or the user's record) and temporary folders."""
        temps = [Path(tempfile.gettempdir())]
        if os.name == "posix":
            temps.append(Path("/tmp"))  # noqa: S108 - Claude Code keeps session scratch here
        return cls(Path(os.path.expanduser("~")), tuple(temps), own_config)

    def roots(self) -> list[str]:
        """Each place as written and resolved, without duplicates."""
        found: list[str] = []
        for place in (self.home, *self.temp_dirs):
            for form in (os.path.abspath(place), os.path.realpath(place)):
                if form not in found:
                    found.append(form)
        return found

    def home_forms(self) -> list[str]:
        return list(dict.fromkeys((os.path.abspath(self.home), os.path.realpath(self.home))))


@dataclass(frozen=True)
class LocalFile:
    """A file that passed every rule: what the broker is told about it, and its bytes."""

    path: str
    name: str
    media_type: str
    sha256: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def description(self) -> JSONObject:
        return {
            "sha256": self.sha256,
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
        }


# ------------------------------------------------------------------ the path rules


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _below(path: str, places: Places) -> list[tuple[str, ...]]:
    """The parts of `path` below each place that contains it (empty when none does)."""
    return [
        PurePath(os.path.relpath(path, root)).parts
        for root in places.roots()
        if _inside(path, root) and path != root
    ]


def credential_name(name: str) -> bool:
    return any(pattern.search(name) for pattern in CREDENTIAL_NAMES)


def check_place(path: str, places: Places, shown: str, *, what: str = "file") -> None:
    """The rules on a normalized absolute path: place, dot names, application data, names."""
    below = _below(path, places)
    if not below:
        raise FileRefused(
            RULE_PLACE,
            shown,
            f"the {what} is outside your home directory and the system temporary folder",
        )
    for parts in below:
        for part in parts:
            if part.startswith("."):
                raise FileRefused(
                    RULE_DOT,
                    shown,
                    f"{part!r} is a dotfile or dot directory (like ~/.ssh, .git or .env); save "
                    "the file elsewhere, such as ~/Pictures or ~/Documents",
                )
    for home in places.home_forms():
        if _inside(path, home) and path != home:
            _check_app_data(PurePath(os.path.relpath(path, home)).parts, shown)
    for parts in below:
        for part in parts:
            if credential_name(part):
                raise FileRefused(
                    RULE_CREDENTIAL_NAME,
                    shown,
                    f"{part!r} is named like a credential (keys, secrets, passwords, tokens)",
                )


def _check_app_data(parts: Sequence[str], shown: str) -> None:
    lowered = [p.casefold() for p in parts]
    if lowered[:1] == ["library"] and lowered[1:2] not in (["cloudstorage"], ["mobile documents"]):
        raise FileRefused(
            RULE_APP_DATA,
            shown,
            "~/Library holds application data; only ~/Library/CloudStorage and "
            "~/Library/Mobile Documents (Dropbox, iCloud) are allowed",
        )
    if lowered[:1] == ["appdata"] and lowered[1:3] != ["local", "temp"]:
        raise FileRefused(
            RULE_APP_DATA,
            shown,
            "AppData holds application data; only its temporary folder (AppData\\Local\\Temp) "
            "is allowed",
        )


def normal_absolute(raw: str, shown: str, what: str = "path") -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise FileRefused(RULE_ABSOLUTE, str(raw), f"the {what} must be a non-empty string")
    if "\x00" in raw:
        raise FileRefused(RULE_ABSOLUTE, shown, f"the {what} contains a NUL character")
    if not os.path.isabs(raw):
        raise FileRefused(
            RULE_ABSOLUTE, shown, f"the {what} must be absolute (like /home/you/Pictures/shot.png)"
        )
    return os.path.normpath(raw)


# ------------------------------------------------------------------ reading for a send


def read_attachment(raw: str, places: Places) -> LocalFile:
    """Check `raw` against every rule, then read it; FileRefused names the broken rule."""
    shown = raw if isinstance(raw, str) else repr(raw)
    written = normal_absolute(raw, shown)
    check_place(written, places, shown)
    try:
        resolved = os.path.realpath(written, strict=True)
    except FileNotFoundError:
        raise FileRefused(RULE_REGULAR, shown, "no such file") from None
    except OSError as exc:
        raise FileRefused(
            RULE_UNCHECKABLE, shown, f"cannot resolve it ({exc.strerror or exc})"
        ) from None
    if resolved != written:
        check_place(resolved, places, shown, what="file it resolves to")
    _check_link(written, resolved, places, shown)
    try:
        st = os.stat(resolved)
    except OSError as exc:
        raise FileRefused(RULE_UNCHECKABLE, shown, f"cannot stat it ({exc.strerror})") from None
    _check_own_config(resolved, st, places, shown)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(RULE_REGULAR, shown, "it is not a regular file")
    _check_hard_links(st, shown)
    if st.st_size == 0:
        raise FileRefused(RULE_REGULAR, shown, "the file is empty")
    data = _read_checked(resolved, st, shown)
    media_type = _media_type(written, data, shown)
    if media_type not in IMAGE_TYPES:
        _check_text(data, places, shown)
    return LocalFile(
        path=written,
        name=os.path.basename(written),
        media_type=media_type,
        sha256=hashlib.sha256(data).hexdigest(),
        data=data,
    )


def _check_link(written: str, resolved: str, places: Places, shown: str) -> None:
    """A linked file only to a target in the same directory; linked directories above it are
    judged by where they resolve to (checked by the caller)."""
    if not os.path.islink(written):
        return
    directory = os.path.realpath(os.path.dirname(written))
    if os.path.dirname(resolved) != directory:
        raise FileRefused(
            RULE_LINK,
            shown,
            "it is a symbolic link to a file in another directory; only links to a file in "
            "the same directory are followed",
        )


def _check_hard_links(st: os.stat_result, shown: str) -> None:
    """A file with another name (a hard link) is refused: that name may be anywhere on the
    same file system, outside the allowed places, and nothing short of a search of the whole
    file system could show it is not."""
    if st.st_nlink > 1:
        raise FileRefused(
            RULE_HARD_LINK,
            shown,
            f"the file has {st.st_nlink} names (hard links), and another may be outside your "
            "home and temporary folders; attach a copy (cp) instead",
        )


def _check_own_config(resolved: str, st: os.stat_result, places: Places, shown: str) -> None:
    own = places.own_config
    if own is None:
        return
    if resolved == own.path or (st.st_dev, st.st_ino) == (own.device, own.inode):
        raise FileRefused(
            RULE_OWN_CONFIG,
            shown,
            "it is this bridge's own configuration file (or a link to it), which holds the "
            "agent's token",
        )


def _read_checked(resolved: str, st: os.stat_result, shown: str) -> bytes:
    """Open the checked file without following a link swapped in meanwhile; read within the
    limit; refuse if what was opened is not what was checked."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(resolved, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused(
                RULE_LINK, shown, "the file became a symbolic link after it was checked"
            ) from None
        raise FileRefused(RULE_UNCHECKABLE, shown, f"cannot open it ({exc.strerror})") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(
            opened.st_mode
        ):
            raise FileRefused(
                RULE_REGULAR, shown, "the file changed between its check and its opening"
            )
        _check_hard_links(opened, shown)
        limit = IMAGE_LIMIT
        if opened.st_size > limit:
            raise FileRefused(RULE_SIZE, shown, _too_large(opened.st_size, limit, "an image"))
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            chunk = os.read(fd, min(MIB, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused(RULE_SIZE, shown, _too_large(len(data), limit, "an image"))
    if not data:
        raise FileRefused(RULE_REGULAR, shown, "the file is empty")
    return data


def _too_large(size: int, limit: int, kind: str) -> str:
    return f"it is {size} bytes; {kind} may be at most {limit // MIB} MiB ({limit} bytes)"


def image_type(data: bytes) -> str | None:
    """The image type by magic bytes: PNG, JPEG, GIF or WebP; None for anything else."""
    for magic, media_type in IMAGE_MAGIC:
        if data.startswith(magic):
            return media_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _media_type(written: str, data: bytes, shown: str) -> str:
    image = image_type(data)
    if image is not None:
        return image
    extension = os.path.basename(written).rpartition(".")[2].lower()
    media_type = DOCUMENT_TYPES.get(extension) if "." in os.path.basename(written) else None
    allowed = ", ".join(DOCUMENT_TYPES)
    if media_type is None:
        raise FileRefused(
            RULE_TYPE,
            shown,
            f"only PNG, JPEG, GIF and WebP images (by their bytes) and {allowed} documents "
            "may be attached",
        )
    if len(data) > DOCUMENT_LIMIT:
        raise FileRefused(RULE_SIZE, shown, _too_large(len(data), DOCUMENT_LIMIT, "a document"))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileRefused(
            RULE_TYPE, shown, f"a .{extension} document must be valid UTF-8 text"
        ) from None
    return media_type


def _check_text(data: bytes, places: Places, shown: str) -> None:
    text = data.decode("utf-8")
    if looks_like_config(text):
        raise FileRefused(
            RULE_OWN_CONFIG,
            shown,
            "it parses as a PocoLobby configuration (a JSON object with url and token), which "
            "holds an agent's or owner's token",
        )
    for what, pattern in CREDENTIAL_CONTENT:
        if pattern.search(text):
            raise FileRefused(
                RULE_CREDENTIAL_CONTENT, shown, f"the text contains what looks like {what}"
            )
    for key, value, at in secret_assignments(text):
        if _secret_value(key, value):
            line = text.count("\n", 0, at) + 1
            raise FileRefused(
                RULE_CREDENTIAL_CONTENT,
                shown,
                f"line {line} gives {key[:60]!r} a value, which looks like a secret "
                "(a password, key or token); remove it from a copy and attach that",
            )


def secret_assignments(text: str) -> list[tuple[str, str, int]]:
    """Each (name, value as written, offset) where a name ending in a guarded word is given a
    value; a guarded word inside a longer one (`keytoken`) names nothing, one starting a
    camelCase word (`accessToken`) does."""
    found = []
    for match in SECRET_ASSIGNMENT.finditer(text.translate(_ASCII_LOWER)):
        start = begin = match.start()
        while begin > 0 and start - begin < 200 and _NAME_CHAR.match(text, begin - 1):
            begin -= 1
        prefix = text[begin:start]
        inside = prefix[-1:].isalnum() and not (prefix[-1].islower() and text[start].isupper())
        if inside:
            continue
        name = prefix + text[start : match.end("word")]
        found.append((name, text[match.start("value") : match.end("value")], begin))
    return found


def _secret_value(key: str, raw: str) -> bool:
    """Whether `raw`, given to a secret's name, may be the secret itself: not empty, masked
    (`***`), a reference (`$VAR`, `${VAR}`, `{{ var }}`, `<placeholder>`, an expression
    such as `os.environ["X"]` or `get()`), a type or constant (`str`, `null`), the name
    itself (`api_key=api_key`) or a count of tokens."""
    quoted = len(raw) >= 2 and raw[0] in "\"'`" and raw[-1] == raw[0]
    value = (raw[1:-1] if quoted else raw).strip()
    if not value or set(value) <= {"*", "\u2022"}:
        return False
    if value.startswith(("$", "{{", "%(", "<")):
        return False
    if quoted:
        return True
    lowered = value.casefold()
    if any(c in value for c in ".([{") or lowered in _NOT_SECRETS:
        return False
    if lowered.replace("-", "_") == key.casefold().replace("-", "_"):
        return False
    return not (key.casefold().endswith("token") and value.isdigit())


def looks_like_config(text: str) -> bool:
    """A JSON object with string `url` and `token` fields: any PocoLobby configuration."""
    try:
        value = load_json(text)
    except JsonTooDeep:  # too deep to parse: its top level is read all the same
        value = scalar_members(text.encode("utf-8", "surrogatepass"))
    except ValueError:
        return False
    return (
        isinstance(value, dict)
        and isinstance(value.get("url"), str)
        and isinstance(value.get("token"), str)
    )
