"""What a judge answer cost: the tokens the server reported, and their price.

The field names differ by server: OpenAI and most compatible servers (vLLM, llama.cpp, Ollama)
send `prompt_tokens`/`completion_tokens`, OpenAI's newer APIs and some proxies
`input_tokens`/`output_tokens`. Cached input is OpenAI's `prompt_tokens_details.cached_tokens`
(`input_tokens_details` in the newer naming) or DeepSeek's `prompt_cache_hit_tokens`; in each,
the cached tokens are part of the input count, and so they are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_INPUT = ("prompt_tokens", "input_tokens")
_OUTPUT = ("completion_tokens", "output_tokens")
_DETAILS = ("prompt_tokens_details", "input_tokens_details")
PER_TOKENS = 1_000_000  # prices are given per million tokens, as the providers list them


@dataclass(frozen=True)
class Tokens:
    input: int = 0
    output: int = 0
    cached_input: int | None = None  # None: the server did not say

    def __add__(self, other: Tokens) -> Tokens:
        cached = (
            None
            if self.cached_input is None and other.cached_input is None
            else (self.cached_input or 0) + (other.cached_input or 0)
        )
        return Tokens(self.input + other.input, self.output + other.output, cached)


@dataclass(frozen=True)
class Prices:
    """USD per million tokens; cached input at the input price unless given (errs high)."""

    input: float
    output: float
    cached_input: float | None = None

    def cost(self, tokens: Tokens) -> float:
        cached = tokens.cached_input or 0
        cached_price = self.input if self.cached_input is None else self.cached_input
        return (
            (tokens.input - cached) * self.input
            + cached * cached_price
            + tokens.output * self.output
        ) / PER_TOKENS


def _count(value: Any) -> int | None:
    # a bool is an int to Python, and a negative or fractional count is no count
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _first(usage: dict[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        count = _count(usage.get(name))
        if count is not None:
            return count
    return None


def tokens_of(body: Any) -> Tokens | None:
    """The usage a response body reports; None when it reports none (a server that does not
    count, or an error body)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    input_tokens = _first(usage, _INPUT)
    output_tokens = _first(usage, _OUTPUT)
    if input_tokens is None and output_tokens is None:
        return None
    cached = None
    for name in _DETAILS:
        details = usage.get(name)
        if isinstance(details, dict) and _count(details.get("cached_tokens")) is not None:
            cached = _count(details.get("cached_tokens"))
            break
    if cached is None:
        cached = _count(usage.get("prompt_cache_hit_tokens"))
    return Tokens(input_tokens or 0, output_tokens or 0, cached)
