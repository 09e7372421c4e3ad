"""Every private Django, Channels and uvicorn name the fast lane leans on still exists with
the shape we use (tests/private_apis.py lists them; lobbies/fastlane/README.md is that list).

An upgrade that renames, removes or reshapes one fails here, by name, before anything
subtler fails elsewhere.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from lobbies.fastlane import store
from tests.private_apis import OUR_SUBCLASSES, PRIVATE_NAMES, PrivateName, render

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "lobbies" / "fastlane" / "README.md"


def _resolve(dotted: str) -> object:
    """A module, or an attribute path inside one (`package.module.Class`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(dotted)


def _assigned(owner: type, name: str) -> bool:
    """Whether the owner's source, or a base's, sets `self.<name>`."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\s*(:[^=\n]*)?=[^=]")
    for klass in owner.__mro__:
        if klass is object:
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if pattern.search(source):
            return True
    return False


def _stub_file(module: str) -> Path:
    import django

    site = Path(django.__file__).resolve().parent.parent
    return site / "django-stubs" / Path(*module.split(".")[1:]).with_suffix(".pyi")


@pytest.mark.parametrize("entry", PRIVATE_NAMES, ids=lambda entry: entry.qualified)
def test_private_name_still_has_the_shape_we_use(entry: PrivateName) -> None:
    if entry.kind == "stub":
        stub = _stub_file(entry.owner)
        assert re.search(rf"^{re.escape(entry.name)}\b", stub.read_text(), re.MULTILINE), (
            f"{entry.qualified} is gone from django-stubs ({stub})"
        )
        return
    owner = _resolve(entry.owner)
    if entry.kind == "ours":
        assert isinstance(owner, type)
        upstream = hasattr(owner, entry.name) or _assigned(owner, entry.name)
        assert not upstream, f"{entry.qualified} now exists upstream"
        return
    if entry.kind == "assigned":
        assert isinstance(owner, type)
        assert _assigned(owner, entry.name), f"{entry.qualified} is no longer set"
        return
    assert hasattr(owner, entry.name), f"{entry.qualified} is gone"
    if entry.kind == "method":
        found = getattr(owner, entry.name)
        assert callable(found), f"{entry.qualified} is no longer callable"
        names = [
            p.name
            for p in inspect.signature(found).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        assert tuple(names) == entry.params, f"{entry.qualified} now takes {names}"
    else:
        assert entry.kind == "attribute", entry.kind


@pytest.mark.parametrize(("ours", "theirs"), OUR_SUBCLASSES)
def test_our_subclasses_add_no_name_of_the_base(ours: str, theirs: str) -> None:
    """A name our subclass defines is either an override the list names, or new to the
    base (else an upgrade's new attribute of that name is silently replaced by ours)."""
    subclass, base = _resolve(ours), _resolve(theirs)
    assert isinstance(subclass, type) and isinstance(base, type)
    listed = {e.name for e in PRIVATE_NAMES if _resolve(e.owner) in base.__mro__}
    own = {n for n in vars(subclass) if not n.startswith("__")}
    own |= _self_assignments(subclass)
    collisions = sorted(
        name for name in own - listed if hasattr(base, name) or _assigned(base, name)
    )
    assert not collisions, f"{ours} replaces {theirs}'s own {collisions}; list them or rename"


def _self_assignments(klass: type) -> set[str]:
    return set(re.findall(r"\bself\.(\w+)\s*(?::[^=\n]*)?=[^=]", inspect.getsource(klass)))


def test_qmark_is_djangos_placeholder_rule() -> None:
    """`lobbies.fastlane.store._qmark` converts placeholders exactly as Django's SQLite cursor."""
    convert = _resolve("django.db.backends.sqlite3.base.SQLiteCursorWrapper.convert_query")
    assert callable(convert)
    for sql in (
        "SELECT 1 WHERE a = %s AND b = %s",
        "SELECT '%%s' || x FROM t WHERE y LIKE '%%a%%' AND z = %s",
        "UPDATE t SET n = n + 1 WHERE id IN (%s, %s, %s) RETURNING id",
    ):
        assert store._qmark(sql) == convert(None, sql), sql


def test_store_instance_is_what_from_db_builds() -> None:
    """`__new__` and a hand-set `_state` give the instance `Model.from_db` gives."""
    from lobbies.models import Lobby

    fields = Lobby._meta.concrete_fields
    attnames = [f.attname for f in fields]
    values: list[object] = [f.get_default() for f in fields]
    ours = store._instance(Lobby, attnames, values, "default")
    theirs = Lobby.from_db("default", attnames, values)
    assert {k: v for k, v in vars(ours).items() if k != "_state"} == {
        k: v for k, v in vars(theirs).items() if k != "_state"
    }
    assert vars(ours._state) == vars(theirs._state)


def test_the_doc_is_the_list() -> None:
    """lobbies/fastlane/README.md holds the table `python -m tests.private_apis` prints."""
    assert render() in DOC.read_text(), (
        "lobbies/fastlane/README.md's table is not tests/private_apis.py's list: "
        "paste `python -m tests.private_apis` over it"
    )


def test_every_listed_file_uses_its_name() -> None:
    """Each entry's files mention the name (a file that stopped using it leaves the list)."""
    for entry in PRIVATE_NAMES:
        for used_in in entry.used_in.split(", "):
            text = (REPO / used_in).read_text()
            name = entry.name if entry.name != "__init__" else entry.owner.rsplit(".", 1)[1]
            assert name in text, f"{used_in} no longer uses {entry.qualified}"
