"""The upload memory budget's accounting rule (lobbies/api/uploads.py): an agent's and a lobby's
shares, and the floor kept for lobbies holding nothing, so no two lobbies starve a third."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.conf import settings
from django.test import override_settings

from lobbies.api.uploads import Shares, UploadBudget, Uploader, shares
from lobbies.errors import BrokerError

MIB = 1024 * 1024
BUDGET = 64 * MIB  # the default POCOLOBBY_UPLOAD_MEMORY_BYTES


def refusal(budget: UploadBudget, size: int, who: Uploader) -> str | None:
    """The 503 uploads_busy message refusing this reservation, or None when it was made."""
    try:
        budget.reserve(size, who)
    except BrokerError as error:
        refused = error
    else:
        return None
    assert refused.status == 503 and refused.code == "uploads_busy"
    return refused.message


def test_the_default_shares_are_an_eighth_a_quarter_and_the_largest_file_as_floor() -> None:
    assert shares(BUDGET) == Shares(agent=10 * MIB, lobby=16 * MIB, floor=10 * MIB)
    assert shares(256 * MIB) == Shares(agent=32 * MIB, lobby=64 * MIB, floor=10 * MIB)
    # A budget smaller than a file: each share is the whole budget, the floor a quarter.
    assert shares(4 * MIB) == Shares(agent=4 * MIB, lobby=4 * MIB, floor=MIB)


def test_two_lobbies_of_stalled_uploads_leave_a_third_lobbys_upload_room() -> None:
    """The fourth probe: three 10 MiB and one 2 MiB stalled upload in each of two lobbies
    held all 64 MiB, and a third lobby's 1 KiB upload was refused."""
    budget = UploadBudget()
    for lobby in (1, 2):
        answers = [
            refusal(budget, size, Uploader(agent=lobby * 10 + n, lobby=lobby))
            for n, size in enumerate((10 * MIB, 10 * MIB, 10 * MIB, 2 * MIB))
        ]
        refused = [a for a in answers if a]
        assert len(refused) == 2, answers
        assert all("this lobby's uploads in progress hold 10485760 bytes" in a for a in refused)
        assert budget.by_lobby[lobby] == 12 * MIB
    assert budget.reserved == 24 * MIB
    assert refusal(budget, 1024, Uploader(agent=31, lobby=3)) is None
    # The third lobby may even take its whole share beside them.
    assert refusal(budget, 10 * MIB, Uploader(agent=32, lobby=3)) is None
    assert refusal(budget, 5 * MIB, Uploader(agent=33, lobby=3)) is None


def test_a_lobby_holding_some_leaves_the_floor_to_lobbies_holding_none() -> None:
    budget = UploadBudget()
    for lobby in (1, 2, 3):  # three lobbies at their share: 48 MiB
        for n in range(2):
            assert refusal(budget, 8 * MIB, Uploader(agent=lobby * 10 + n, lobby=lobby)) is None
    assert refusal(budget, 6 * MIB, Uploader(agent=40, lobby=4)) is None  # 54 MiB: 10 left
    # Lobby 4 holds some: it may not take the floor.
    floor = refusal(budget, 1024, Uploader(agent=41, lobby=4))
    assert floor is not None
    assert "hold 56623104 of 67108864 bytes" in floor and "the last 10485760" in floor
    assert "lobbies holding none" in floor and "POCOLOBBY_UPLOAD_MEMORY_BYTES" in floor
    # A lobby holding nothing may: the largest file fits.
    assert refusal(budget, 10 * MIB, Uploader(agent=50, lobby=5)) is None
    assert budget.reserved == BUDGET
    whole = refusal(budget, 1, Uploader(agent=60, lobby=6))
    assert whole is not None and "hold 67108864 of 67108864" in whole


def test_an_agent_holds_at_most_its_share_and_a_release_gives_it_back() -> None:
    budget = UploadBudget()
    agent = Uploader(agent=1, lobby=1)
    assert refusal(budget, 6 * MIB, agent) is None
    refused = refusal(budget, 5 * MIB, agent)
    assert refused is not None and "this agent's uploads in progress hold 6291456" in refused
    assert "an eighth of POCOLOBBY_UPLOAD_MEMORY_BYTES" in refused
    assert refusal(budget, 5 * MIB, Uploader(agent=2, lobby=1)) is None
    budget.release(6 * MIB, agent)
    assert budget.by_agent == {2: 5 * MIB} and budget.by_lobby == {1: 5 * MIB}
    assert refusal(budget, 10 * MIB, agent) is None
    assert budget.reserved == 15 * MIB


@pytest.mark.parametrize("limit", [30 * MIB, 48 * MIB, 64 * MIB, 1024 * MIB])
def test_two_lobbies_never_starve_a_third_when_the_budget_holds_three_files(limit: int) -> None:
    """Whatever two lobbies try (the largest file first, then smaller ones, each from a
    fresh agent), a third lobby holding nothing still fits the floor, whenever the budget is
    at least three of the largest file."""
    largest = 10 * MIB
    with override_settings(BOUNDS=replace(settings.BOUNDS, upload_memory_bytes=limit)):
        share = shares(limit)
        budget = UploadBudget()
        tries = [largest, largest, share.floor, share.floor, MIB, MIB, 1024, 1]
        for lobby in (1, 2):
            for n, size in enumerate(tries):
                refusal(budget, size, Uploader(agent=lobby * 100 + n, lobby=lobby))
            assert budget.by_lobby[lobby] <= share.lobby
        assert refusal(budget, share.floor, Uploader(agent=1, lobby=3)) is None
