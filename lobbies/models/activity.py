"""What each agent is doing, as its host can tell: its turns, its host, `pocolobby msg` calls,
and the activity changes owed to agents that watch others (`watch_agents`)."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from lobbies.models.agents import Agent
from lobbies.models.choices import Host, closed_set


class AgentActivity(models.Model):
    """One row per agent that reported anything: the current turn and where it came from.

    The stretches of work themselves are the board's (board.WorkStretch, the strip's history);
    this row is the state `list_agents` and the dashboard's chips read, kept in the same
    transaction as the stretch, so a restart reads back what was reported.
    """

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="activity"
    )
    host = models.CharField(max_length=16, choices=Host.choices, blank=True, default="")
    turn_started_at = models.DateTimeField(null=True, blank=True)
    # Set by a turn's end; a start clears it, so "open" is started and not ended.
    turn_ended_at = models.DateTimeField(null=True, blank=True)
    # The latest `pocolobby msg` call (a tool call without runtime headers), kept to 30 s.
    msg_seen_at = models.DateTimeField(null=True, blank=True)
    # watch_agents: None off, [] every agent, else the agent ids watched.
    watching = models.JSONField(null=True, blank=True, default=None)
    last_activity_push_at = models.DateTimeField(null=True, blank=True)
    # The activity last announced to watchers (""), so the timer pushes changes only.
    announced = models.CharField(max_length=16, blank=True, default="")
    announced_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=closed_set("host", Host) | Q(host=""), name="activity_host"
            )
        ]
        indexes = [
            models.Index(
                fields=["agent"], name="activity_watchers", condition=Q(watching__isnull=False)
            )
        ]

    def __str__(self) -> str:
        return f"activity of {self.agent_id}"


class ActivityChange(models.Model):
    """One agent's new activity owed to a watcher: pushed once, coalesced like receipts."""

    watcher = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="owed_activity")
    agent_id = models.CharField(max_length=40)
    activity = models.CharField(max_length=16)
    since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    pushed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["watcher", "pushed_at"], name="activity_change_due")]

    def __str__(self) -> str:
        return f"{self.agent_id} {self.activity} for {self.watcher_id}"
