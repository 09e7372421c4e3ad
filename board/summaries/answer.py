"""The model's answer, read through the SDK's types and validated before the page sees it:
strict structure, the request's agents only (each once), strings clipped."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationError

from board.models import AttemptOutcome
from board.summaries.prices import cost_of
from board.summaries.prompt import BuiltRequest

if TYPE_CHECKING:  # the SDK takes about a second of every broker's start: only its types here
    from anthropic.types import Message

NOW_CHARS = 200
NEXT_CHARS = 200

# {"agents": {agent_id: {"now": str, "next": str | None}}, "sources": [...]}: the stored shape.
AgentLines = dict[str, dict[str, str | None]]


@dataclass(frozen=True)
class Judged:
    """One answer's usage, cost and verdict: a summary, or why it is invalid."""

    outcome: AttemptOutcome
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal
    error: str = ""
    summary: dict[str, object] | None = None


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    class Entry(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)
        agent_id: str
        now: str
        next: str | None

    agents: list[Entry]


def judge(answer: Message, built: BuiltRequest) -> Judged:
    """Usage, cost and the validated summary of one answer, or why it is invalid."""
    usage = answer.usage
    input_tokens = (
        usage.input_tokens
        + (usage.cache_creation_input_tokens or 0)
        + (usage.cache_read_input_tokens or 0)
    )
    output_tokens = usage.output_tokens
    cost = cost_of(built.request.model, input_tokens, output_tokens)

    def invalid(error: str) -> Judged:
        return Judged(AttemptOutcome.INVALID, input_tokens, output_tokens, cost, error)

    if answer.stop_reason == "max_tokens":
        return invalid("the answer was cut short")
    if answer.stop_reason == "refusal":
        return invalid("the model declined")
    text = "".join(block.text for block in answer.content if block.type == "text")
    try:
        output = _Output.model_validate_json(text)
    except ValidationError:
        return invalid("the answer did not match the summary's schema")
    return Judged(
        AttemptOutcome.SUCCEEDED,
        input_tokens,
        output_tokens,
        cost,
        summary={"agents": _clean(output, built.agent_ids), "sources": built.sources},
    )


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _clean(output: _Output, known: frozenset[str]) -> AgentLines:
    """Only the request's agents, each once, strings clipped; an empty `next` is unknown."""
    agents: AgentLines = {}
    for entry in output.agents:
        if entry.agent_id not in known or entry.agent_id in agents:
            continue
        now = _clip(entry.now, NOW_CHARS)
        if not now:
            continue
        upcoming = _clip(entry.next, NEXT_CHARS) if entry.next is not None else ""
        agents[entry.agent_id] = {"now": now, "next": upcoming or None}
    return agents
