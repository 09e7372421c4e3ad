"""The agent-side reports under /v1 the dashboard shows: plan usage, turns and token counts.

They take the agent's bearer token like every /v1 route but no runtime headers: a status line
or a hook belongs to no runtime, and what it reports is a fact about the session, not an
action in the lobby. Parse strictly -> call one action -> answer JSON.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Annotated, Literal

from django.http import HttpRequest, JsonResponse
from django.utils import timezone
from pydantic import Field, StrictInt, StrictStr, field_validator

from board.actions import SessionDay, record_turn, store_token_days
from lobbies import usage
from lobbies.access.tokens import agent_for_token
from lobbies.api import answers, service_answers
from lobbies.api.catalog import parse_arguments
from lobbies.api.http import Documented, api_view, bearer_token, json_body
from lobbies.api.schemas import Operation
from lobbies.errors import ErrorCode, bad_request
from lobbies.wire.facts import iso

# A hook's own clock may run a little ahead of ours; more than this is a wrong clock.
CLOCK_SLACK = timedelta(minutes=5)
TURN_MAX_AGE = timedelta(days=1)
MAX_TOKEN_DAYS = 400
TOKEN_LIMIT = 10**13


class TurnReport(Operation):
    event: Literal["start", "end"]
    at: StrictInt | StrictStr | None = None
    # Who reports: Claude Code's hooks, or a bridge watching its pane (codex, gemini, shell).
    host: answers.HostName | None = None

    @field_validator("at")
    @classmethod
    def _moment(cls, value: int | str | None) -> int | str | None:
        if value is not None:
            usage.moment_of(value)
        return value


Count = Annotated[StrictInt, Field(ge=0, le=TOKEN_LIMIT)]


class TokenDayReport(Operation):
    day: StrictStr
    session_id: StrictStr = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")
    input_tokens: Count = 0
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_creation_tokens: Count = 0

    @field_validator("day")
    @classmethod
    def _day(cls, value: str) -> str:
        try:
            date.fromisoformat(value)
        except ValueError:
            raise ValueError("must be a date, YYYY-MM-DD") from None
        if len(value) != 10:
            raise ValueError("must be a date, YYYY-MM-DD")
        return value


class TokensReport(Operation):
    days: list[TokenDayReport] = Field(max_length=MAX_TOKEN_DAYS)


@api_view(
    ("PUT",), Documented("PUT", service_answers.UsageStored, body=usage.UsageReport, errors=(413,))
)
def put_usage(request: HttpRequest) -> JsonResponse:
    """Plan usage from the agent's status line; the latest reading is stored (one row per agent)."""
    agent = agent_for_token(bearer_token(request))
    report = parse_arguments(usage.UsageReport, json_body(request))
    now = timezone.now()
    reading = usage.record_reading(agent.pk, report, now)
    return JsonResponse({"stored": True, "usage": usage.usage_entry(reading, now)})


@api_view(("POST",), Documented("POST", service_answers.TurnAnswer, body=TurnReport, errors=(413,)))
def post_turn(request: HttpRequest) -> JsonResponse:
    """A turn started or ended, from Claude Code's hooks or a bridge watching its pane (busy,
    then back at its prompt): the agent's activity and the dashboard's work stretches."""
    agent = agent_for_token(bearer_token(request))
    report = parse_arguments(TurnReport, json_body(request))
    now = timezone.now()
    at = now if report.at is None else usage.moment_of(report.at)
    if at > now + CLOCK_SLACK:
        raise bad_request(
            "at: is in the future; check the machine's clock", code=ErrorCode.INVALID_TIME
        )
    if at < now - TURN_MAX_AGE:
        raise bad_request("at: is more than a day ago", code=ErrorCode.INVALID_TIME)
    stretch = record_turn(agent, report.event, min(at, now), report.host)
    return JsonResponse(
        {
            "event": report.event,
            "stretch": None
            if stretch is None
            else {"started_at": iso(stretch.started_at), "ended_at": iso(stretch.ended_at)},
        }
    )


@api_view(
    ("PUT",), Documented("PUT", service_answers.TokensStored, body=TokensReport, errors=(413,))
)
def put_tokens(request: HttpRequest) -> JsonResponse:
    """Token counts per session and UTC day; each row is replaced, never added twice."""
    agent = agent_for_token(bearer_token(request))
    report = parse_arguments(TokensReport, json_body(request))
    now = timezone.now()
    days: dict[tuple[str, date], SessionDay] = {}
    for entry in report.days:
        day = date.fromisoformat(entry.day)
        if day > (now + timedelta(days=1)).date():
            raise bad_request(f"days: {entry.day} is in the future", code=ErrorCode.INVALID_TIME)
        if (entry.session_id, day) in days:
            raise bad_request(
                f"days: {entry.session_id} on {entry.day} is listed twice",
                code=ErrorCode.DUPLICATE_DAY,
            )
        days[(entry.session_id, day)] = SessionDay(
            entry.session_id,
            day,
            entry.input_tokens,
            entry.output_tokens,
            entry.cache_read_tokens,
            entry.cache_creation_tokens,
        )
    stored = store_token_days(agent, list(days.values()), now)
    return JsonResponse({"stored": stored})
