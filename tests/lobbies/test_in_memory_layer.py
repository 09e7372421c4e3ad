"""The embedded broker's channel layer: what a group send reaches."""

from __future__ import annotations

import pytest

from lobbies.fastlane.channel_layer import InMemoryChannelLayer

pytestmark = pytest.mark.asyncio


async def test_a_group_send_reaches_every_member_once():
    layer = InMemoryChannelLayer()
    first, second, outsider = [await layer.new_channel() for _ in range(3)]
    for channel in (first, second):
        await layer.group_add("agent-1", channel)
    await layer.group_send("agent-1", {"type": "agent.wake", "priority": "info"})
    for channel in (first, second):
        assert await layer.receive(channel) == {"type": "agent.wake", "priority": "info"}
    for channel in (first, second):  # once: nothing more waits (an emptied queue is dropped)
        assert channel not in layer.channels or layer.channels[channel].empty()
    assert outsider not in layer.channels  # nothing was queued for a non-member


async def test_a_full_member_misses_the_message_and_the_others_still_get_it():
    layer = InMemoryChannelLayer(capacity=1)
    full, free = await layer.new_channel(), await layer.new_channel()
    for channel in (full, free):
        await layer.group_add("agent-1", channel)
    await layer.send(full, {"type": "agent.wake", "priority": "info"})
    await layer.group_send("agent-1", {"type": "agent.wake", "priority": "important"})
    assert await layer.receive(full) == {"type": "agent.wake", "priority": "info"}
    assert await layer.receive(free) == {"type": "agent.wake", "priority": "important"}


async def test_a_group_without_members_is_a_no_op():
    layer = InMemoryChannelLayer()
    await layer.group_send("agent-404", {"type": "agent.wake", "priority": "info"})
    assert layer.channels == {}
