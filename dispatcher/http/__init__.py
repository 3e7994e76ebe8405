"""The HTTP + SSE gateway (``reactq serve``): FastAPI on uvicorn.

Serve it with ``reactq serve`` or ``uvicorn reactq.dispatcher.http:app`` (``app`` is built on
first access, so importing this package has no side effects) or
``uvicorn --factory reactq.dispatcher.http:create_app``.

Rooms: ``app`` (create_app), ``gateway`` (what routes share + the one dependency),
``middleware`` (body limit, strict JSON), ``auth`` (API keys, scopes, tenants), ``errors`` (exception handlers, 4xx shapes),
``sse`` (the one SSE generator), ``hub`` (the stream readers its watchers share), ``pacing``
(admission a few requests per loop turn), ``runs``, ``dags``, ``batches``, ``ops`` (routers).

Routes: ``POST /v1/runs`` · ``GET /v1/runs/{id}`` ·
``GET /v1/runs/{id}/events`` (SSE, ``Last-Event-ID``) · ``POST /v1/runs/{id}/interrupts`` ·
``POST /v1/runs/{id}/cancel`` · ``POST /v1/batches`` · ``GET /v1/batches/{id}`` · the same
for ``/v1/dags`` · ``GET /healthz`` · ``GET /readyz`` · ``GET /metrics`` · ``GET /openapi.json``.
``REACTQ_API_TOKEN`` set ⇒ every route but the probes needs ``Authorization: Bearer <key>``:
the token (an admin key of tenant ``default``) or an ``rq_`` key (``auth``; ``/v1/keys``).
"""

from __future__ import annotations

from typing import Any

from reactq.dispatcher.http.app import create_app
from reactq.dispatcher.http.gateway import Gateway
from reactq.dispatcher.http.auth import KeyAuth
from reactq.dispatcher.http.middleware import BodyLimit

# The submodule ``app`` (create_app) would shadow the ``app`` attribute uvicorn looks up:
# drop the attribute (the module stays in sys.modules) so ``__getattr__`` below answers.
del globals()["app"]

_app: Any = None


def __getattr__(name: str) -> Any:
    """``reactq.dispatcher.http:app`` for uvicorn, built on first access (no work at import)."""
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(name)


__all__ = ["create_app", "Gateway", "BodyLimit", "KeyAuth"]
