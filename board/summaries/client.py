"""One call to Anthropic's Messages API through the SDK: the answer as the SDK's `Message`,
or the failure in plain words and whether it is worth the run's one retry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings

from board.summaries.prompt import SummaryRequest

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message

REQUEST_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class CallFailed:
    error: str  # plain words for the page and the attempt row
    retry: bool  # worth the run's one retry (a timeout, no connection, 408/409/429/5xx)


def _client() -> anthropic.Anthropic:
    # local: the SDK takes about a second of every broker's start, and only summaries call it
    import anthropic

    return anthropic.Anthropic(
        api_key=settings.ANTHROPIC_API_KEY,
        base_url=settings.ANTHROPIC_BASE_URL,
        max_retries=0,
        timeout=REQUEST_TIMEOUT_SECONDS,
    )


def ask(request: SummaryRequest) -> Message | CallFailed:
    """Send the request once (the SDK's own retries off: the run decides)."""
    import anthropic  # local: as in _client

    try:
        return _client().messages.create(
            model=request.model,
            max_tokens=request.max_tokens,
            system=request.system,
            messages=request.messages,
            output_config=request.output_config,
        )
    except anthropic.APITimeoutError:
        return CallFailed("the model did not answer in time", retry=True)
    except anthropic.APIConnectionError:
        return CallFailed("the Anthropic API could not be reached", retry=True)
    except anthropic.APIStatusError as error:
        status = error.status_code
        return CallFailed(
            f"the Anthropic API answered {status}",
            retry=status in (408, 409, 429) or status >= 500,
        )
    except anthropic.AnthropicError as error:
        return CallFailed(
            f"the Anthropic API's answer was unusable ({type(error).__name__})", retry=False
        )
