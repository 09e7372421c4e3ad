"""The local file rules over real files, links and hard links in a fake home directory.

Each rule refuses at least one case and allows its everyday neighbour. HOME is set to a
directory under pytest's tmp_path (itself inside the system temporary folder, /tmp), so the
rules see the same inputs a bridge reads from its environment; a file outside both is taken
from the repository checkout (or /etc, when the checkout is itself in a temporary folder).
"""

from __future__ import annotations

import hashlib
import os
import string
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobbies.wire.media import DEFAULT_DOCUMENT_BYTES as DOCUMENT_LIMIT
from lobbies.wire.media import DEFAULT_IMAGE_BYTES as IMAGE_LIMIT
from lobbies.wire.media import AttachmentLimits
from pocolobby.bridge import files
from pocolobby.bridge.config import load_config
from pocolobby.bridge.files import (
    FileIdentity,
    FileRefused,
    LocalFile,
    Places,
    read_attachment,
)
from tests.bridge.disk import GIF, JPEG, OUTSIDE_FILE, PNG, WEBP, Disk

Case = Callable[[Disk], str]


# (case, how to make it, the rule that refuses it or None when it is allowed)
CASES: list[tuple[str, Case, str | None]] = [
    # absolute paths only
    ("relative path", lambda d: "Pictures/shot.png", files.RULE_ABSOLUTE),
    ("absolute path", lambda d: str(d.write("Pictures/shot.png", PNG)), None),
    # inside home or the temporary folder, as written and resolved
    ("outside home and temp", lambda d: str(OUTSIDE_FILE), files.RULE_PLACE),
    (
        "dot-dot out of the temporary folder",
        lambda d: f"{d.scratch}/../../../../../..{OUTSIDE_FILE}",
        files.RULE_PLACE,
    ),
    (
        "a file in the temporary folder",
        lambda d: str(d.write("shot.png", PNG, base=d.scratch)),
        None,
    ),
    (
        "dot-dot that stays in home",
        lambda d: f"{d.write('Documents/notes.md').parent}/../Documents/notes.md",
        None,
    ),
    (
        "a link out of home",
        lambda d: str(d.link("Documents/readme.md", OUTSIDE_FILE)),
        files.RULE_PLACE,
    ),
    # no dotfiles, no dot directories
    ("~/.ssh", lambda d: str(d.write(".ssh/notes.txt")), files.RULE_DOT),
    (".env file", lambda d: str(d.write("project/.env")), files.RULE_DOT),
    (".git directory", lambda d: str(d.write("project/.git/notes.txt")), files.RULE_DOT),
    (
        "claude worktree",
        lambda d: str(d.write(".claude/worktrees/w1/shot.png", PNG)),
        files.RULE_DOT,
    ),
    (
        "dot directory in temp",
        lambda d: str(d.write(".cache/shot.png", PNG, base=d.scratch)),
        files.RULE_DOT,
    ),
    ("dots inside a name", lambda d: str(d.write("project/release.v2.notes.md")), None),
    # no application data
    (
        "~/Library/Preferences",
        lambda d: str(d.write("Library/Preferences/app.json", "{}")),
        files.RULE_APP_DATA,
    ),
    ("~/library any case", lambda d: str(d.write("library/Caches/x.txt")), files.RULE_APP_DATA),
    (
        "Dropbox in CloudStorage",
        lambda d: str(d.write("Library/CloudStorage/Dropbox/shot.png", PNG)),
        None,
    ),
    (
        "iCloud Mobile Documents",
        lambda d: str(d.write("Library/Mobile Documents/x/notes.md")),
        None,
    ),
    ("AppData Roaming", lambda d: str(d.write("AppData/Roaming/app/log.txt")), files.RULE_APP_DATA),
    ("AppData Local Temp", lambda d: str(d.write("AppData/Local/Temp/claude/shot.png", PNG)), None),
    # nothing named like a credential
    ("api-key", lambda d: str(d.write("Documents/api-key.txt")), files.RULE_CREDENTIAL_NAME),
    (
        "private_key",
        lambda d: str(d.write("Documents/private_key.txt")),
        files.RULE_CREDENTIAL_NAME,
    ),
    ("ssh key", lambda d: str(d.write("Documents/SSH Key.txt")), files.RULE_CREDENTIAL_NAME),
    ("masterkeys", lambda d: str(d.write("Documents/masterkeys.md")), files.RULE_CREDENTIAL_NAME),
    ("*.pem", lambda d: str(d.write("Documents/server.pem")), files.RULE_CREDENTIAL_NAME),
    ("*.key", lambda d: str(d.write("Documents/server.KEY")), files.RULE_CREDENTIAL_NAME),
    ("keys.*", lambda d: str(d.write("Documents/keys.json", "[]")), files.RULE_CREDENTIAL_NAME),
    ("key.*", lambda d: str(d.write("Documents/Key.txt")), files.RULE_CREDENTIAL_NAME),
    ("id_*", lambda d: str(d.write("Documents/id_ed25519")), files.RULE_CREDENTIAL_NAME),
    ("*secret*", lambda d: str(d.write("Documents/my-Secrets.md")), files.RULE_CREDENTIAL_NAME),
    (
        "*credential*",
        lambda d: str(d.write("Documents/gcloud-credentials.json", "{}")),
        files.RULE_CREDENTIAL_NAME,
    ),
    ("*password*", lambda d: str(d.write("Documents/PASSWORDS.csv")), files.RULE_CREDENTIAL_NAME),
    ("*passwd*", lambda d: str(d.write("Documents/htpasswd.txt")), files.RULE_CREDENTIAL_NAME),
    (
        "*keychain*",
        lambda d: str(d.write("Documents/login-keychain.txt")),
        files.RULE_CREDENTIAL_NAME,
    ),
    (
        "*keystore*",
        lambda d: str(d.write("Documents/app-keystore.txt")),
        files.RULE_CREDENTIAL_NAME,
    ),
    ("*.p12", lambda d: str(d.write("Documents/cert.p12")), files.RULE_CREDENTIAL_NAME),
    ("*.pfx", lambda d: str(d.write("Documents/cert.PFX")), files.RULE_CREDENTIAL_NAME),
    ("a secrets folder", lambda d: str(d.write("secrets/db.txt")), files.RULE_CREDENTIAL_NAME),
    ("keyframe-panel.png", lambda d: str(d.write("Pictures/keyframe-panel.png", PNG)), None),
    ("key-light.png", lambda d: str(d.write("Pictures/key-light.png", PNG)), None),
    ("monkey-notes.md", lambda d: str(d.write("Documents/monkey-notes.md")), None),
    ("keynote-outline.md", lambda d: str(d.write("Documents/keynote-outline.md")), None),
    # no keys or tokens inside a text file
    (
        "private key block",
        lambda d: str(
            d.write("Documents/notes.md", "x\n-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
        ),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "RSA private key block",
        lambda d: str(d.write("Documents/n.txt", "-----BEGIN RSA PRIVATE KEY-----\n")),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "public key block",
        lambda d: str(d.write("Documents/n.txt", "-----BEGIN PUBLIC KEY-----\nabc\n")),
        None,
    ),
    (
        "OAuth access_token field",
        lambda d: str(d.write("Documents/auth.json", '{"access_token": "ya29.abc"}')),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "OAuth refresh_token field",
        lambda d: str(d.write("Documents/env.sh", "refresh_token=1//0g\n")),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "OAuth client_secret field",
        lambda d: str(d.write("Documents/app.py", "client_secret = 'x'\n")),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "prose about access tokens",
        lambda d: str(
            d.write("Documents/notes.md", "Access tokens expire; the access_token is refreshed.\n")
        ),
        None,
    ),
    (
        "aws_secret_access_key line",
        lambda d: str(d.write("Documents/aws.txt", "[default]\naws_secret_access_key = wJalr\n")),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "AKIA key id",
        lambda d: str(d.write("Documents/log.log", "using AKIAIOSFODNN7EXAMPLE now\n")),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    (
        "AKIA in prose",
        lambda d: str(d.write("Documents/n.md", "AKIA keys start with AKIA.\n")),
        None,
    ),
    *[
        (
            f"GitHub {prefix} token",
            lambda d, p=prefix: str(d.write("Documents/ci.md", f"token {p}{'a1B2' * 9}\n")),
            files.RULE_CREDENTIAL_CONTENT,
        )
        for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
    ],
    (
        "GitHub prefixes in prose",
        lambda d: str(d.write("Documents/n.md", "Tokens start with ghp_ or github_pat_.\n")),
        None,
    ),
    (
        "Anthropic key",
        lambda d: str(d.write("Documents/run.sh", "export X=sk-ant-api03-AbCdEf123456\n")),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    *[
        (
            f"Slack {prefix} token",
            lambda d, p=prefix: str(d.write("Documents/slack.txt", f"{p}1234567890-abcdef\n")),
            files.RULE_CREDENTIAL_CONTENT,
        )
        for prefix in ("xoxa-", "xoxb-", "xoxp-", "xoxs-")
    ],
    (
        "Slack prefix in prose",
        lambda d: str(d.write("Documents/n.md", "Bot tokens begin xoxb-.\n")),
        None,
    ),
    # Issue 28: PocoLobby tokens, secrets given a value in any case, YAML configs.
    *[
        (
            f"a PocoLobby {prefix} token",
            lambda d, p=prefix: str(d.write("Documents/notes.md", f"use {p}{'aB3_-x9Z' * 5}\n")),
            files.RULE_CREDENTIAL_CONTENT,
        )
        for prefix in ("plt_", "pla_")
    ],
    (
        "PocoLobby prefixes in prose",
        lambda d: str(d.write("Documents/n.md", "Agent tokens start plt_, the admin's pla_.\n")),
        None,
    ),
    *[
        (
            f"assigned: {line!r}",
            lambda d, text=line: str(d.write("Documents/settings.txt", f"# setup\n{text}\n")),
            files.RULE_CREDENTIAL_CONTENT,
        )
        for line in (
            "Access_Token = x",
            "ACCESS-TOKEN: abc",
            "accessToken: 'abc'",
            "export DB_PASSWORD=hunter2",
            "MYSQL_ROOT_PASSWORD: hunter2",
            '"apiKey": "abc"',
        )
    ],
    (
        "a YAML configuration with values",
        lambda d: str(
            d.write(
                "Documents/config.md",
                "database:\n  host: db\n  user: app\n  password: s3cr3t!\n"
                "app:\n  secret_key: 9f8e7d\n  api_key: k-123\n",
            )
        ),
        files.RULE_CREDENTIAL_CONTENT,
    ),
    *[
        (
            f"named, not assigned: {line!r}",
            lambda d, text=line: str(d.write("Documents/app.py", f"{text}\n")),
            None,
        )
        for line in (
            "password = os.environ['DB_PASSWORD']",
            "client = Client(api_key=api_key)",
            "def sign_in(password: str) -> None: ...",
            "token = ${TOKEN}",
            "max_tokens = 4096",
            "if password == other: pass",
            "api_key: ''",
            "password: ***",
        )
    ],
    (
        "a key pattern in an image is not text",
        lambda d: str(d.write("Pictures/shot.png", PNG + b"AKIAIOSFODNN7EXAMPLE")),
        None,
    ),
    # never a PocoLobby configuration
    (
        "the bridge's own configuration",
        lambda d: str(d.home / "PocoLobby" / "agent.json"),
        files.RULE_OWN_CONFIG,
    ),
    (
        "a hard link of it under another name",
        lambda d: str(
            _hard_link(d.home / "PocoLobby" / "agent.json", d.home / "Documents" / "notes.json")
        ),
        files.RULE_OWN_CONFIG,
    ),
    (
        # Only the device and inode tell: by its name it would be refused as not an image.
        "a hard link of it named like a screenshot",
        lambda d: str(_hard_link(d.home / "PocoLobby" / "agent.json", d.home / "shot.png")),
        files.RULE_OWN_CONFIG,
    ),
    (
        "a symbolic link to it in the same folder",
        lambda d: str(d.link("PocoLobby/settings.json", d.home / "PocoLobby" / "agent.json")),
        files.RULE_OWN_CONFIG,
    ),
    (
        "another agent's configuration",
        lambda d: str(d.write("Documents/other.json", '{"url": "https://x", "token": "plt_y"}')),
        files.RULE_OWN_CONFIG,
    ),
    (
        "a JSON document with a url and no token",
        lambda d: str(d.write("Documents/site.json", '{"url": "https://x", "title": "t"}')),
        None,
    ),
    # no hard links: the other name may be anywhere on the file system
    (
        "a hard link of a file in the temporary folder",
        lambda d: str(_hard_link(d.write("shot.png", PNG, base=d.scratch), d.home / "s.png")),
        files.RULE_HARD_LINK,
    ),
    # symbolic links only within the same folder, and passing every rule
    (
        "a link to a file in the same folder",
        lambda d: str(_linked(d, "Pictures/latest.png", "Pictures/shot-1.png")),
        None,
    ),
    (
        "a link to a file in another folder",
        lambda d: str(_linked(d, "Pictures/latest.png", "Documents/shot-1.png")),
        files.RULE_LINK,
    ),
    (
        "a link to a dotfile in the same folder",
        lambda d: str(_linked(d, "Pictures/latest.png", "Pictures/.hidden.png")),
        files.RULE_DOT,
    ),
    (
        "a linked folder into Dropbox",
        lambda d: str(_linked_folder(d, "Dropbox", "Library/CloudStorage/Dropbox") / "shot.png"),
        None,
    ),
    (
        "a linked folder into a dot directory",
        lambda d: str(_linked_folder(d, "config", ".config") / "shot.png"),
        files.RULE_DOT,
    ),
    (
        "a link to nothing",
        lambda d: str(d.link("Pictures/gone.png", d.home / "nothing.png")),
        files.RULE_REGULAR,
    ),
    # allowed types, by content
    ("PNG by its bytes, any name", lambda d: str(d.write("Pictures/capture", PNG)), None),
    ("JPEG", lambda d: str(d.write("Pictures/photo.jpg", JPEG)), None),
    ("GIF", lambda d: str(d.write("Pictures/anim.gif", GIF)), None),
    ("WebP", lambda d: str(d.write("Pictures/still.webp", WEBP)), None),
    (
        "text named .png",
        lambda d: str(d.write("Pictures/fake.png", "not an image")),
        files.RULE_TYPE,
    ),
    ("a PDF", lambda d: str(d.write("Documents/paper.pdf", b"%PDF-1.7\n")), files.RULE_TYPE),
    ("a name without a type", lambda d: str(d.write("Documents/README", "hello")), files.RULE_TYPE),
    (
        "invalid UTF-8 markdown",
        lambda d: str(d.write("Documents/bad.md", b"caf\xe9\n")),
        files.RULE_TYPE,
    ),
    *[
        (f".{ext} document", lambda d, e=ext: str(d.write(f"Documents/file.{e}", "ok = 1\n")), None)
        for ext in files.DOCUMENT_TYPES
    ],
    # a regular, non-empty file
    ("an empty file", lambda d: str(d.write("Documents/empty.md", "")), files.RULE_REGULAR),
    ("a folder", lambda d: str(d.write("Documents/x.md").parent), files.RULE_REGULAR),
    ("a FIFO", lambda d: str(_fifo(d.home / "Documents" / "pipe.txt")), files.RULE_REGULAR),
    # size limits
    (
        "an image over 10 MiB",
        lambda d: str(d.write("Pictures/big.png", PNG + b"\0" * (IMAGE_LIMIT - len(PNG) + 1))),
        files.RULE_SIZE,
    ),
    (
        "an image of exactly 10 MiB",
        lambda d: str(d.write("Pictures/big.png", PNG + b"\0" * (IMAGE_LIMIT - len(PNG)))),
        None,
    ),
    (
        "a document over 5 MiB",
        lambda d: str(d.write("Documents/big.txt", "a" * (DOCUMENT_LIMIT + 1))),
        files.RULE_SIZE,
    ),
    (
        "a document of exactly 5 MiB",
        lambda d: str(d.write("Documents/big.txt", "a" * DOCUMENT_LIMIT)),
        None,
    ),
]


def _hard_link(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    os.link(source, target)
    return target


def _linked(disk: Disk, link: str, target: str) -> Path:
    real = disk.write(target, PNG)
    return disk.link(link, real)


def _linked_folder(disk: Disk, link: str, target: str) -> Path:
    disk.write(f"{target}/shot.png", PNG)
    return disk.link(link, disk.home / target)


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def test_every_rule_refuses_a_case_and_allows_a_neighbour():
    rules = {rule for _, _, rule in CASES}
    named = {v for k, v in vars(files).items() if k.startswith("RULE_")}
    # Structural rules, tested where they live: the send flow (only `attachments`), the save.
    assert named - rules == {
        files.RULE_ONLY_ATTACHMENTS,
        files.RULE_NO_REPLACE,
        files.RULE_UNCHECKABLE,
    }
    assert None in rules


@pytest.mark.parametrize(("make", "rule"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_local_file_rules(disk: Disk, make: Case, rule: str | None):
    path = make(disk)
    if rule is None:
        found = read_attachment(path, disk.places)
        data = Path(path).read_bytes()
        assert found.data == data and found.size == len(data)
        assert found.name == os.path.basename(os.path.normpath(path))
        assert len(found.sha256) == 64 and found.description()["sha256"] == found.sha256
    else:
        with pytest.raises(FileRefused) as refused:
            read_attachment(path, disk.places)
        assert refused.value.rule == rule, str(refused.value)
        assert f"'{rule}'" in str(refused.value) and path in str(refused.value)


def test_types_and_descriptions(disk: Disk):
    assert read_attachment(str(disk.write("a/p", PNG)), disk.places).media_type == "image/png"
    assert (
        read_attachment(str(disk.write("a/j.jpeg", JPEG)), disk.places).media_type == "image/jpeg"
    )
    assert read_attachment(str(disk.write("a/g.gif", GIF)), disk.places).media_type == "image/gif"
    assert (
        read_attachment(str(disk.write("a/w.webp", WEBP)), disk.places).media_type == "image/webp"
    )
    doc = read_attachment(str(disk.write("a/Notes.MD", "# Title\n")), disk.places)
    assert doc.description() == {
        "sha256": hashlib.sha256(b"# Title\n").hexdigest(),
        "name": "Notes.MD",
        "media_type": "text/markdown",
        "size": 8,
    }


def test_a_file_swapped_for_a_link_after_the_check_is_not_read(
    disk: Disk, monkeypatch: pytest.MonkeyPatch
):
    """The checked path is opened without following a link put there meanwhile."""
    shot = disk.write("Pictures/shot.png", PNG)
    secret = disk.write(".ssh/notes.txt", "private")
    real_stat = os.stat
    swapped: list[bool] = []

    def swap_then_stat(path, *args, **kwargs):  # the world changes between check and open
        result = real_stat(path, *args, **kwargs)
        if str(path) == str(shot) and not swapped:
            swapped.append(True)
            shot.unlink()
            shot.symlink_to(secret)
        return result

    monkeypatch.setattr(files.os, "stat", swap_then_stat)
    with pytest.raises(FileRefused) as refused:
        read_attachment(str(shot), disk.places)
    assert refused.value.rule == files.RULE_LINK


def test_a_file_replaced_after_the_check_is_not_read(disk: Disk, monkeypatch: pytest.MonkeyPatch):
    shot = disk.write("Pictures/shot.png", PNG)
    real_stat = os.stat
    swapped = []

    def replace_then_stat(path, *args, **kwargs):
        result = real_stat(path, *args, **kwargs)
        if str(path) == str(shot) and not swapped:
            swapped.append(True)
            replacement = shot.with_name("new.png")
            replacement.write_bytes(PNG + b"other")
            os.replace(replacement, shot)
        return result

    monkeypatch.setattr(files.os, "stat", replace_then_stat)
    with pytest.raises(FileRefused) as refused:
        read_attachment(str(shot), disk.places)
    assert refused.value.rule == files.RULE_REGULAR and "changed" in str(refused.value)


# ---------------------------------------------------------------- generated path names


def _outcome(raw: str, places: Places) -> LocalFile | FileRefused:
    try:
        return read_attachment(raw, places)
    except FileRefused as refused:
        return refused


NAME_CHARS = string.ascii_letters + string.digits + " ._-~()[]é漢"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.text(NAME_CHARS, min_size=1, max_size=40))
def test_generated_file_names_are_read_only_when_every_name_rule_allows_them(disk: Disk, name: str):
    folder = disk.home / "gen"
    folder.mkdir(exist_ok=True)
    path = folder / name
    if path.exists() or path.is_symlink() or name in (".", ".."):
        return
    path.write_text("hello\n")
    try:
        found = _outcome(str(path), disk.places)
        if isinstance(found, FileRefused):
            expected_rule = (
                files.RULE_DOT
                if name.startswith(".")
                else files.RULE_CREDENTIAL_NAME
                if files.credential_name(name)
                else files.RULE_TYPE
            )
            assert found.rule == expected_rule, (name, str(found))
        else:
            assert not name.startswith(".")
            assert not files.credential_name(name)
            assert name.rpartition(".")[2].lower() in files.DOCUMENT_TYPES
            assert found.name == name and found.data == b"hello\n"
    finally:
        path.unlink()


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.lists(
        st.one_of(
            st.sampled_from(["..", ".", "", ".ssh", "Library", "AppData", "Documents", "etc"]),
            st.text(NAME_CHARS + "/\\\x00", min_size=1, max_size=12),
        ),
        min_size=0,
        max_size=6,
    ),
    absolute=st.booleans(),
    under_home=st.booleans(),
)
def test_generated_paths_are_refused_with_a_rule_or_read_from_inside_home(
    disk: Disk, parts: list[str], absolute: bool, under_home: bool
):
    """Whatever the path, the answer is a refusal naming a rule, or a file inside home."""
    raw = "/".join(parts)
    if under_home:
        raw = f"{disk.home}/{raw}"
    elif absolute:
        raw = "/" + raw
    rules = {v for k, v in vars(files).items() if k.startswith("RULE_")}
    found = _outcome(raw, disk.places)
    if isinstance(found, FileRefused):
        assert found.rule in rules
        return
    resolved = os.path.realpath(found.path)
    assert resolved.startswith(str(disk.home) + os.sep) or resolved.startswith("/tmp/")


def test_the_loaded_configuration_carries_its_identity_for_the_rules(disk: Disk):
    """load_config records the resolved path, device and inode the rules compare with."""
    path = disk.home / "PocoLobby" / "agent.json"
    config = load_config(path)
    assert config.identity == FileIdentity.of(path)
    stat = path.stat()
    assert config.identity is not None
    assert (config.identity.device, config.identity.inode) == (stat.st_dev, stat.st_ino)
    linked = _hard_link(path, disk.home / "Pictures" / "shot.png")
    with pytest.raises(FileRefused) as refused:
        read_attachment(str(linked), Places.current(config.identity))
    assert refused.value.rule == files.RULE_OWN_CONFIG
    # Without the identity the same file is still refused, for its second name.
    with pytest.raises(FileRefused) as refused:
        read_attachment(str(linked), Places.current(None))
    assert refused.value.rule == files.RULE_HARD_LINK


def test_a_hard_link_to_a_file_outside_the_allowed_places_is_refused(tmp_path: Path) -> None:
    """Issue 28: a hard link in the home folder to a file outside every allowed place was
    sent; its path shows nothing, only its link count does."""
    home = tmp_path / "home"
    outside = tmp_path / "outside"
    home.mkdir()
    outside.mkdir()
    secret = outside / "notes.txt"
    secret.write_text("the other name is outside\n")
    places = Places(home, temp_dirs=())
    os.link(secret, home / "notes.txt")
    with pytest.raises(FileRefused) as refused:
        read_attachment(str(home / "notes.txt"), places)
    assert refused.value.rule == files.RULE_HARD_LINK
    assert "has 2 names (hard links)" in refused.value.reason
    assert "attach a copy" in refused.value.reason
    (home / "copy.txt").write_bytes(secret.read_bytes())  # a copy is sent
    assert read_attachment(str(home / "copy.txt"), places).data == secret.read_bytes()


def test_the_brokers_limits_replace_the_defaults(disk: Disk):
    """The limits a broker sends (its catalog's attachment_limits) bound what is read."""
    small: AttachmentLimits = {"image_bytes": 100, "document_bytes": 50}
    shot = str(disk.write("a/big.png", PNG + b"\0" * 100))
    with pytest.raises(FileRefused) as refused:
        read_attachment(shot, disk.places, small)
    assert refused.value.rule == files.RULE_SIZE
    assert "an image may be at most 100 bytes" in str(refused.value)
    with pytest.raises(FileRefused) as refused:
        read_attachment(str(disk.write("a/notes.txt", "a" * 51)), disk.places, small)
    assert "a document may be at most 50 bytes" in str(refused.value)
    assert read_attachment(str(disk.write("a/ok.txt", "a" * 50)), disk.places, small).size == 50
    # A broker that keeps larger documents than the default images: read up to its limit.
    large: AttachmentLimits = {"image_bytes": 100, "document_bytes": IMAGE_LIMIT + 10}
    long = str(disk.write("a/long.txt", "a" * (IMAGE_LIMIT + 1)))
    assert read_attachment(long, disk.places, large).size == IMAGE_LIMIT + 1
    with pytest.raises(FileRefused):
        read_attachment(long, disk.places)  # the defaults, for a broker that sends none
