"""`pocolobby team apply FILE`: a lobby's agents and rooms from one TOML manifest, against a
real broker subprocess; what it changes is read back from the broker's store."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import httpx
import pytest

from pocolobby.cli import main
from tests.cli.test_msg_output import assert_terminal_safe
from tests.server import Broker

pytest_plugins = ("tests.server_fixtures",)
pytestmark = pytest.mark.slow

CODE = re.compile(r"enrolment code for (\S+) in \S+:.*?\n\n  pocolobby join (\S+)@(\S+)\n", re.S)

TEAM = """\
lobby = "{lobby}"

[agents.lead]
description = "Plans the work"
role_file = "roles/lead.md"
permissions = ["broadcast", "manage_rooms"]

[agents.backend]
description = "API work"

[rooms.design]
members = ["lead", "backend"]
"""


def write(folder: Path, text: str, name: str = "team.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "roles").mkdir(exist_ok=True)
    (folder / "roles" / "lead.md").write_text("You lead: split the work, review it.\n")
    path = folder / name
    path.write_text(text)
    return path


def store(broker: Broker, sql: str, *params: str) -> list[tuple]:
    with sqlite3.connect(broker.data_dir / "pocolobby.sqlite3") as db:
        return db.execute(sql, params).fetchall()


def agents(broker: Broker, lobby: str) -> dict[str, tuple]:
    """Each agent's (description, role, broadcast, manage_rooms)."""
    rows = store(
        broker,
        "SELECT a.agent_id, a.description, a.role, a.broadcast, a.manage_rooms "
        "FROM lobbies_agent a JOIN lobbies_lobby l ON a.lobby_id = l.id "
        "WHERE l.name = ? AND a.agent_id != 'owner'",
        lobby,
    )
    return {row[0]: tuple(row[1:]) for row in rows}


def rooms(broker: Broker, lobby: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {
        room: set()
        for (room,) in store(
            broker,
            "SELECT r.room_id FROM lobbies_room r JOIN lobbies_lobby l ON r.lobby_id = l.id "
            "WHERE l.name = ?",
            lobby,
        )
    }
    for room, agent in store(
        broker,
        "SELECT r.room_id, a.agent_id FROM lobbies_roommember m "
        "JOIN lobbies_room r ON m.room_id = r.id JOIN lobbies_agent a ON m.agent_id = a.id "
        "JOIN lobbies_lobby l ON r.lobby_id = l.id WHERE l.name = ?",
        lobby,
    ):
        found[room].add(agent)
    return found


def audit_count(broker: Broker) -> int:
    return store(broker, "SELECT COUNT(*) FROM lobbies_auditevent")[0][0]


def apply(broker: Broker, manifest: Path, *options: str):
    return broker.cli("team", "apply", str(manifest), *options)


def test_apply_creates_the_team_and_each_new_agent_joins_with_its_code(
    module_broker: Broker, tmp_path: Path
):
    manifest = write(tmp_path / "team", TEAM.format(lobby="team-new"))
    done = apply(module_broker, manifest)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "  create lobby team-new\n" in out
    assert (
        "  add agent lead: permissions broadcast, manage_rooms; description 'Plans the work'; "
        "role 37 characters\n"
    ) in out
    assert "  add agent backend: permissions none; description 'API work'\n" in out
    assert "  create room design: members lead, backend\n" in out
    assert "4 changes made" in out

    assert agents(module_broker, "team-new") == {
        "lead": ("Plans the work", "You lead: split the work, review it.\n", 1, 1),
        "backend": ("API work", "", 0, 0),
    }
    assert rooms(module_broker, "team-new") == {"design": {"lead", "backend"}}

    # One code per new agent, the command `agent add --enroll` prints; each redeems.
    issued = {name: (code, url) for name, code, url in CODE.findall(out)}
    assert set(issued) == {"lead", "backend"}
    for name, (code, url) in issued.items():
        assert url == module_broker.url
        joined = httpx.post(f"{url}/v1/join", json={"code": code})
        assert joined.status_code == 200, joined.text
        assert joined.json()["agent"] == name and joined.json()["lobby"] == "team-new"
    assert out.count("send it privately") == 1

    # The same file again: nothing changes, and it says so.
    before = audit_count(module_broker)
    again = apply(module_broker, manifest)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"lobby team-new already matches {manifest}: nothing changed"
    assert audit_count(module_broker) == before


def test_a_dry_run_prints_the_plan_and_changes_nothing(module_broker: Broker, tmp_path: Path):
    manifest = write(tmp_path / "team", TEAM.format(lobby="team-dry"))
    before = audit_count(module_broker)
    done = apply(module_broker, manifest, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "would change lobby team-dry" in done.stdout
    assert "  create lobby team-dry\n" in done.stdout and "  add agent lead" in done.stdout
    assert "dry run: nothing was changed (4 changes to make" in done.stdout
    assert "pocolobby join" not in done.stdout
    assert store(module_broker, "SELECT 1 FROM lobbies_lobby WHERE name = 'team-dry'") == []
    assert audit_count(module_broker) == before


def test_an_edit_updates_descriptions_permissions_roles_and_members(
    module_broker: Broker, tmp_path: Path
):
    manifest = write(tmp_path / "team", TEAM.format(lobby="team-edit"))
    assert apply(module_broker, manifest).returncode == 0
    (tmp_path / "team" / "roles" / "lead.md").write_text("You lead, and you test.\n")
    manifest.write_text(
        TEAM.format(lobby="team-edit")
        .replace('"API work"', '"API and storage"')
        .replace('["broadcast", "manage_rooms"]', '["manage_rooms"]')
        .replace('members = ["lead", "backend"]', 'members = ["lead", "qa"]')
        + '\n[agents.qa]\npermissions = ["broadcast"]\n'
    )
    planned = apply(module_broker, manifest, "--dry-run")
    assert agents(module_broker, "team-edit")["backend"][0] == "API work"
    done = apply(module_broker, manifest)
    assert done.returncode == 0, done.stderr
    changes = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    assert changes == [
        "  change agent lead: role replaced (37 -> 24 characters)",
        "  change agent lead: permissions broadcast, manage_rooms -> manage_rooms",
        "  change agent backend: description 'API work' -> 'API and storage'",
        "  add agent qa: permissions broadcast",
        "  change room design: members: adds qa; removes backend (their unseen copies are held)",
        "  pocolobby join " + CODE.search(done.stdout).group(2) + f"@{module_broker.url}",
    ]
    # The dry run listed the same changes the apply made.
    assert [line for line in planned.stdout.splitlines() if line.startswith("  ")] == changes[:-1]
    assert agents(module_broker, "team-edit") == {
        "lead": ("Plans the work", "You lead, and you test.\n", 0, 1),
        "backend": ("API and storage", "", 0, 0),
        "qa": ("", "", 1, 0),
    }
    assert rooms(module_broker, "team-edit") == {"design": {"lead", "qa"}}
    actions = {
        row[0]
        for row in store(
            module_broker,
            "SELECT action FROM lobbies_auditevent WHERE lobby_name = 'team-edit'",
        )
    }
    assert {"role_set", "permissions_changed", "description_set"} <= actions


def test_prune_removes_agents_and_archives_rooms_the_manifest_leaves_out(
    module_broker: Broker, tmp_path: Path
):
    manifest = write(
        tmp_path / "team",
        TEAM.format(lobby="team-prune") + '\n[agents.old]\n\n[rooms.old-room]\nmembers = ["old"]\n',
    )
    assert apply(module_broker, manifest).returncode == 0
    manifest.write_text(TEAM.format(lobby="team-prune"))

    kept = apply(module_broker, manifest)
    assert kept.returncode == 0, kept.stderr
    assert "lobby team-prune already matches" in kept.stdout
    assert "not in the manifest, left as they are: agents old; rooms old-room" in kept.stdout
    assert "old" in agents(module_broker, "team-prune")

    pruned = apply(module_broker, manifest, "--prune")
    assert pruned.returncode == 0, pruned.stderr
    assert "  remove agent old: its tokens and inbox are deleted" in pruned.stdout
    assert "  archive room old-room: archived" in pruned.stdout
    assert set(agents(module_broker, "team-prune")) == {"lead", "backend"}
    assert set(rooms(module_broker, "team-prune")) == {"design"}

    # A room the manifest names again comes back from its archive.
    manifest.write_text(
        TEAM.format(lobby="team-prune") + '\n[rooms.old-room]\nmembers = ["backend"]\n'
    )
    back = apply(module_broker, manifest)
    assert "  restore room old-room: from its archive, members backend" in back.stdout
    assert rooms(module_broker, "team-prune")["old-room"] == {"backend"}


REFUSALS = {
    "unknown key": (
        TEAM.replace('description = "API work"', 'descripton = "API work"'),
        "unknown key 'agents.backend.descripton'",
    ),
    "unknown top-level key": ("prune = true\n" + TEAM, "unknown key 'prune'"),
    "wrong type": (
        TEAM.replace('description = "API work"', "description = 3"),
        "agents.backend.description: Input should be a valid string",
    ),
    "members not a list": (
        TEAM.replace('members = ["lead", "backend"]', 'members = "lead"'),
        "rooms.design.members: Input should be a valid list",
    ),
    "unknown permission": (
        TEAM.replace('["broadcast", "manage_rooms"]', '["broadcast", "admin"]'),
        "agents.lead.permissions.1: Input should be 'broadcast' or 'manage_rooms'",
    ),
    "member not an agent": (
        TEAM.replace('["lead", "backend"]', '["lead", "frontend"]'),
        "rooms.design.members: 'frontend' is not an agent of the manifest or of lobby",
    ),
    "invalid agent name": (
        TEAM.replace("[agents.backend]", "[agents.Back_End]"),
        "agents.Back_End: agent name 'Back_End' is not valid",
    ),
    "reserved agent name": (TEAM.replace("[agents.backend]", "[agents.owner]"), "agents.owner:"),
    "invalid room name": (
        TEAM.replace("[rooms.design]", '[rooms."Design Room"]'),
        "rooms.Design Room: room id 'Design Room' is not valid",
    ),
    "invalid lobby name": (TEAM.replace("{lobby}", "My Team"), "lobby: lobby name 'My Team'"),
    "missing lobby": ("\n".join(TEAM.splitlines()[1:]), "missing key 'lobby'"),
    "missing role file": (
        TEAM.replace("roles/lead.md", "roles/nobody.md"),
        "agents.lead.role_file: cannot read the role file",
    ),
    "role file not a string": (
        TEAM.replace('"roles/lead.md"', "7"),
        "agents.lead.role_file: must be a file's path",
    ),
    "inline role": (
        TEAM.replace('role_file = "roles/lead.md"', 'role = "lead"'),
        "agents.lead.role: unknown key; put the role in a file",
    ),
    "a date": (TEAM.replace('"API work"', "2026-12-05"), "agents.backend.description: a date"),
    "not TOML": (TEAM + "[agents.lead\n", "is not valid TOML"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_bad_manifest_is_refused_naming_the_key_and_nothing_changes(
    module_broker: Broker,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
):
    text, said = REFUSALS[case]
    lobby = "team-" + re.sub(r"[^a-z]+", "-", case)
    manifest = write(tmp_path, text.replace("{lobby}", lobby))
    # In this process (the CLI's, without a subprocess's start-up): the broker's address and token.
    monkeypatch.setenv("POCOLOBBY_URL", module_broker.url)
    monkeypatch.setenv("POCOLOBBY_ADMIN_TOKEN", module_broker.admin_token)
    before = audit_count(module_broker)
    assert main(["team", "apply", str(manifest)]) == 1
    err = capsys.readouterr().err
    [said_here] = [line for line in err.splitlines() if line.startswith("pocolobby: ")]
    assert said in said_here, err
    assert store(module_broker, "SELECT 1 FROM lobbies_lobby WHERE name = ?", lobby) == []
    assert audit_count(module_broker) == before


def test_a_missing_manifest_is_refused(module_broker: Broker, tmp_path: Path):
    done = apply(module_broker, tmp_path / "nowhere.toml")
    assert done.returncode == 1
    assert f"cannot read the manifest {tmp_path / 'nowhere.toml'}" in done.stderr


def test_a_retired_lobby_name_is_refused_before_anything_changes(
    module_broker: Broker, tmp_path: Path
):
    module_broker.cli_ok("lobby", "create", "team-gone")
    module_broker.cli_ok("lobby", "delete", "team-gone")
    manifest = write(tmp_path, TEAM.format(lobby="team-gone"))
    before = audit_count(module_broker)
    done = apply(module_broker, manifest)
    assert done.returncode == 1
    assert "lobby: lobby name 'team-gone' belonged to a deleted lobby" in done.stderr
    assert "nothing was changed" in done.stderr
    assert audit_count(module_broker) == before


def test_names_from_the_manifest_print_terminal_safe(module_broker: Broker, tmp_path: Path):
    manifest = write(
        tmp_path,
        TEAM.format(lobby="team-safe").replace('"API work"', '"API\\u001b[6n work\\u202e"'),
    )
    done = apply(module_broker, manifest, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert_terminal_safe(done.stdout + done.stderr)
    refused = apply(
        module_broker, write(tmp_path, TEAM.replace("{lobby}", "team-x\\u001b]0;t\\u0007"))
    )
    assert refused.returncode == 1
    assert_terminal_safe(refused.stdout + refused.stderr)
