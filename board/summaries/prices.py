"""What a summary attempt costs, and the most it may cost before it is sent.

The prices are the operator's assumptions about Anthropic's list prices, to be updated when
those change: they decide the stored cost of every attempt and therefore when the daily
ceiling stops a lobby.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from board.models import BoardConfig, Effort, SummaryModel
from board.summaries.prompt import MAX_TOKENS, BuiltRequest, canonical

DAILY_CEILING_USD = Decimal(5)
# Characters per token measured on one lobby's notes; used only to estimate a request's cost.
CHARS_PER_TOKEN = 2.4


@dataclass(frozen=True)
class Price:
    """USD per million tokens; above `long_from` input tokens the long-context rates apply."""

    input: Decimal
    output: Decimal
    long_input: Decimal
    long_output: Decimal
    long_from: int = 100_000


PRICES: dict[str, Price] = {
    SummaryModel.HAIKU: Price(
        input=Decimal("1"), output=Decimal("5"), long_input=Decimal("2"), long_output=Decimal("7.5")
    ),
    SummaryModel.SONNET: Price(
        input=Decimal("3"),
        output=Decimal("15"),
        long_input=Decimal("6"),
        long_output=Decimal("22.5"),
    ),
}


def cost_of(model: str, input_tokens: int, output_tokens: int) -> Decimal:
    price = PRICES.get(model, PRICES[SummaryModel.SONNET])
    long = input_tokens > price.long_from
    per_input = price.long_input if long else price.input
    per_output = price.long_output if long else price.output
    total = (per_input * input_tokens + per_output * output_tokens) / Decimal(1_000_000)
    return total.quantize(Decimal("0.000001"))


def estimated_cost(built: BuiltRequest) -> Decimal:
    """The most this request can cost: its input by characters, its whole max_tokens out."""
    request = built.request
    input_tokens = math.ceil(len(canonical(request.arguments())) / CHARS_PER_TOKEN)
    return cost_of(request.model, input_tokens, request.max_tokens)


def least_cost(lobby_id: int) -> Decimal:
    """What any attempt of this lobby is estimated at, at least: its whole max_tokens out at
    the configured model and effort (the input's share comes on top)."""
    config = BoardConfig.objects.filter(lobby_id=lobby_id).first()
    model = config.summary_model if config else SummaryModel.HAIKU
    effort = config.summary_effort if config else Effort.LOW
    return cost_of(model, 0, MAX_TOKENS.get(effort, MAX_TOKENS[Effort.LOW]))
