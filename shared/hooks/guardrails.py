"""Two ready-made guardrails (hooks at ``RUN_START`` and ``ANSWER``).

=====================  =========  ==============================================================
hook                   point      what it does
=====================  =========  ==============================================================
``query_tripwire``     RUN_START  blocks a query containing a denied word or matching a pattern
``pii_redactor``       ANSWER     rewrites e-mail addresses, phone numbers, card numbers (Luhn
                                  checked) and IBANs (mod-97 checked) as ``[redacted <kind>]``
=====================  =========  ==============================================================

Workers register them from settings (``guardrail_hooks``): ``REACTQ_GUARDRAIL_DENY_WORDS``
(comma-separated words, matched whole and case-insensitively), ``REACTQ_GUARDRAIL_DENY_PATTERNS``
(a JSON list of regular expressions, searched case-insensitively) and ``REACTQ_GUARDRAIL_PII``
(the kinds to redact, comma-separated: ``email,phone,card,iban``, or ``all``). Or build them
in code and list them in ``REACTQ_HOOKS`` like any hook.

For a run with an ``output_schema`` the redactor rewrites the strings inside ``output`` and
answers with that value's JSON text, so the answer stays JSON; a number that is a card number
becomes the redaction text, which the schema may then refuse (the run fails rather than leak).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from reactq.shared.errors import ConfigError
from reactq.shared.hooks.base import Hook, HookContext, HookPoint, HookResult
from reactq.shared.settings import Settings

__all__ = ["PII_KINDS", "guardrail_hooks", "pii_redactor", "query_tripwire", "redact"]

PII_KINDS = ("iban", "card", "email", "phone")
"""What the redactor knows, in the order it looks for them (an IBAN before its digits)."""

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
# A phone number: an optional +country code, then 2–5 groups of digits (parentheses allowed)
# joined by spaces, dots or dashes; 8–15 digits in all. Without a '+' at least two separators,
# so plain numbers, years and amounts are left alone.
_PHONE = re.compile(r"(?<![\w+])(\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,5}(?:[ .-]\d{2,5}){1,4}(?![\w])")


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def _iban_ok(text: str) -> bool:
    raw = text.replace(" ", "")
    if not 15 <= len(raw) <= 34:
        return False
    moved = raw[4:] + raw[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _card(m: re.Match[str]) -> bool:
    return _luhn(re.sub(r"\D", "", m.group(0)))


_DATE = re.compile(r"\d{4}([./-])\d{1,2}\1\d{1,2}|\d{1,2}([./-])\d{1,2}\2\d{4}")


def _phone(m: re.Match[str]) -> bool:
    if _DATE.fullmatch(m.group(0)):
        return False  # 2024-01-05 has the shape of a short number
    digits = re.sub(r"\D", "", m.group(0))
    separators = len(re.findall(r"[ .()-]", m.group(0)))
    return 8 <= len(digits) <= 15 and (m.group(1) is not None or separators >= 2)


_CHECKS: dict[str, tuple[re.Pattern[str], Callable[[re.Match[str]], bool]]] = {
    "iban": (_IBAN, lambda m: _iban_ok(m.group(0))),
    "card": (_CARD, _card),
    "email": (_EMAIL, lambda m: True),
    "phone": (_PHONE, _phone),
}


def redact(text: str, kinds: Iterable[str] = PII_KINDS) -> str:
    """``text`` with every match of ``kinds`` replaced by ``[redacted <kind>]``."""
    wanted = set(kinds)
    for kind in PII_KINDS:
        if kind in wanted:
            pattern, ok = _CHECKS[kind]
            text = pattern.sub(_replacer(kind, ok), text)
    return text


def _replacer(kind: str, ok: Callable[[re.Match[str]], bool]) -> Callable[[re.Match[str]], str]:
    def replace(m: re.Match[str]) -> str:
        return f"[redacted {kind}]" if ok(m) else m.group(0)
    return replace


def _redact_value(value: Any, kinds: Iterable[str]) -> Any:
    """``value`` (parsed JSON) with its strings redacted; an integer that is personal data
    (a card number) becomes the redaction text."""
    if isinstance(value, str):
        return redact(value, kinds)
    if isinstance(value, list):
        return [_redact_value(v, kinds) for v in value]
    if isinstance(value, dict):
        return {k: _redact_value(v, kinds) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
        cleaned = redact(text, kinds)
        return cleaned if cleaned != text else value
    return value


def pii_kinds(spec: str | Iterable[str]) -> list[str]:
    """``"email, card"`` or ``"all"`` → the kinds; an unknown kind is a ``ConfigError``."""
    names = [s.strip().lower() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    if names == ["all"]:
        return list(PII_KINDS)
    unknown = [n for n in names if n not in PII_KINDS]
    if unknown:
        raise ConfigError(f"pii_redactor: unknown kinds {unknown}; use {list(PII_KINDS)} or 'all'")
    return names


def pii_redactor(kinds: str | Iterable[str] = PII_KINDS, *, name: str = "pii_redactor",
                 priority: int = 100) -> Hook:
    """An ``ANSWER`` hook redacting personal data from the final answer (see the module doc)."""
    chosen = pii_kinds(kinds)

    async def check(ctx: HookContext) -> HookResult:
        if ctx.output is not None:
            value = _redact_value(ctx.output, chosen)
            if value == ctx.output:
                return HookResult()
            return HookResult(modified_answer=json.dumps(value, ensure_ascii=False))
        text = ctx.answer or ""
        cleaned = redact(text, chosen)
        return HookResult(modified_answer=cleaned) if cleaned != text else HookResult()

    return Hook(name=name, hook_point=HookPoint.ANSWER, handler=check, priority=priority,
                description=f"Redact {', '.join(chosen)} from answers.")


def query_tripwire(words: Iterable[str] = (), patterns: Iterable[str] = (), *,
                   name: str = "query_tripwire", priority: int = -100) -> Hook:
    """A ``RUN_START`` hook refusing a query with a denied word (whole word, any case) or a
    match of one of ``patterns`` (regular expressions, any case)."""
    denied = [w.strip() for w in words if w.strip()]
    compiled: list[re.Pattern[str]] = []
    for p in patterns:
        try:
            compiled.append(re.compile(p, re.IGNORECASE))
        except re.error as exc:
            raise ConfigError(f"query_tripwire: pattern {p!r} is not a valid regular expression: {exc}") from exc
    if denied:
        compiled.insert(0, re.compile(r"\b(?:" + "|".join(map(re.escape, denied)) + r")\b", re.IGNORECASE))

    async def check(ctx: HookContext) -> HookResult:
        for pattern in compiled:
            if pattern.search(ctx.query or ""):
                return HookResult(allow=False, error="The query was refused by policy (it matches a "
                                                     "denied word or pattern).")
        return HookResult()

    return Hook(name=name, hook_point=HookPoint.RUN_START, handler=check, priority=priority,
                description="Refuse queries with denied words or patterns.")


def guardrail_hooks(settings: Settings) -> list[Hook]:
    """The built-in guardrails the settings switch on (none by default)."""
    hooks: list[Hook] = []
    words = [w for w in settings.guardrail_deny_words.split(",") if w.strip()]
    if words or settings.guardrail_deny_patterns:
        hooks.append(query_tripwire(words, settings.guardrail_deny_patterns))
    if settings.guardrail_pii.strip():
        hooks.append(pii_redactor(settings.guardrail_pii))
    return hooks
