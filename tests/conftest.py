"""Test-wide settings: no test can reach a real model endpoint."""

from __future__ import annotations

import os

import reactq.shared.llm.base as llm_base

# Only loopback endpoints (the scripted server, a local model) are allowed in tests.
llm_base.ALLOW_REAL_LLM = False

# Tests never touch the machine's own Redis or a developer's configuration.
for _var in ("REACTQ_REDIS_URL", "REACTQ_BROKER_URL", "REACTQ_REDIS_CLUSTER", "REACTQ_MODELS", "REACTQ_TOOLS", "REACTQ_HOOKS"):
    os.environ.pop(_var, None)
