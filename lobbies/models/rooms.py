"""Rooms: shared conversations inside a lobby, and the names retired rooms keep."""

from __future__ import annotations

from django.db import models

from lobbies.models.agents import Agent, Lobby


class Room(models.Model):
    """A shared conversation inside a lobby; membership decides who receives its messages."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="rooms")
    room_id = models.CharField(max_length=40)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "room_id"], name="room_unique_per_lobby")
        ]

    def __str__(self) -> str:
        return self.room_id


class RoomMember(models.Model):
    room = models.ForeignKey(Room, on_delete=models.CASCADE, related_name="members")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="room_memberships")
    joined_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["room", "agent"], name="room_member_unique")]

    def __str__(self) -> str:
        return f"{self.agent_id} in {self.room_id}"


class ArchivedRoom(models.Model):
    """A retired room: its name stays reserved so no new room inherits its history."""

    lobby = models.ForeignKey(Lobby, on_delete=models.CASCADE, related_name="archived_rooms")
    room_id = models.CharField(max_length=40)
    archived_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lobby", "room_id"], name="archived_room_unique")
        ]

    def __str__(self) -> str:
        return f"archived {self.room_id}"
