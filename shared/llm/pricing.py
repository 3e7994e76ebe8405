"""Prices of models and the cost of one call, from the usage the provider reported.

A registry entry may carry ``price = {input_per_mtok, output_per_mtok,
cached_input_per_mtok}``: US dollars per million tokens. A call's cost is

    (prompt - cached) * input + cached * cached_input + completion * output   (per 1e6)

where ``cached`` is the provider's ``prompt_tokens_details.cached_tokens`` (our usage key
``cache_read_input_tokens``); without a cached price, cached tokens cost the input price.
Costs are kept to ``COST_DIGITS`` decimals (a billionth of a cent), so sums stay exact in
tests and reports.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["COST_DIGITS", "Price", "call_cost", "priced", "reserve_cost"]

#: Decimals a cost is rounded to (1e-11 USD).
COST_DIGITS = 11


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0)

    @property
    def cached_rate(self) -> float:
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok


def call_cost(usage: dict[str, Any], price: Price) -> float:
    """The dollars one call cost, from its provider usage dict."""
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = min(prompt, int(usage.get("cache_read_input_tokens") or 0))
    micro = (prompt - cached) * price.input_per_mtok + cached * price.cached_rate \
        + completion * price.output_per_mtok
    return round(micro / 1_000_000, COST_DIGITS)


def priced(usage: dict[str, Any], price: Price | None) -> dict[str, Any]:
    """``usage`` with its ``cost_usd`` when the model has a price (and usage was reported)."""
    if price is None or not usage:
        return usage
    return {**usage, "cost_usd": call_cost(usage, price)}


def reserve_cost(prompt_tokens: int, max_completion: int, price: Price) -> float:
    """The worst case of a call about to be made: its prompt estimate at the input price
    plus ``max_completion`` tokens at the output price."""
    return round((prompt_tokens * price.input_per_mtok + max_completion * price.output_per_mtok)
                 / 1_000_000, COST_DIGITS)


def add_cost(a: float, b: float) -> float:
    return round(a + b, COST_DIGITS)
