"""An ANSWER guardrail the guardrail tests' workers load (``REACTQ_HOOKS``): it blocks any
answer that mentions "TOP SECRET"."""

from __future__ import annotations

import reactq


@reactq.hook("answer", name="no_secrets")
def no_secrets(ctx: reactq.HookContext) -> reactq.HookResult:
    if "TOP SECRET" in (ctx.answer or ""):
        return reactq.HookResult(allow=False, error="answers may not quote classified material")
    return reactq.HookResult()
