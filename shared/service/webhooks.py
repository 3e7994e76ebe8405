"""Webhooks at the door: a webhook URL is checked before anything is stored or enqueued.

The check is the ``http_fetch`` SSRF guard's (``reactq.shared.tools.netguard``): the host is
resolved and every address it resolves to must be public unless ``REACTQ_WEBHOOK_ALLOW``
allows it (hosts, ``host:port``s, CIDRs). Nothing is connected to here; each delivery
attempt checks again and connects to the address it checked (a DNS answer that changes
after the door, DNS rebinding, is refused then).
"""

from __future__ import annotations

import httpx2

from reactq.shared.errors import RequestError
from reactq.shared.requests import WebhookSpec
from reactq.shared.settings import Settings
from reactq.shared.tools.netguard import Allowlist, FetchRefused, checked_address_sync

ALLOW_SETTING = "REACTQ_WEBHOOK_ALLOW"


def check_webhook(spec: WebhookSpec | None, settings: Settings, *, field: str = "webhook") -> None:
    """Refuse (``RequestError`` naming ``field.url``) a URL the guard refuses, or any webhook
    when no signing secret is configured."""
    if spec is None:
        return
    if settings.webhook_secret is None or not settings.webhook_secret.get_secret_value():
        raise RequestError(f"{field}: webhooks are signed, and REACTQ_WEBHOOK_SECRET is not set "
                           "(whsec_ followed by a base64 key)", field=field)
    try:
        url = httpx2.URL(spec.url)
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
        if not host:
            raise FetchRefused(f"refused: '{spec.url}' has no host")
        checked_address_sync(host, port, allowlist(settings), ALLOW_SETTING)
    except FetchRefused as exc:
        raise RequestError(f"{field}.url: {exc}", field=f"{field}.url") from None
    except Exception as exc:  # httpx2.InvalidURL and friends
        raise RequestError(f"{field}.url: not a valid URL ({exc})", field=f"{field}.url") from None


def allowlist(settings: Settings) -> Allowlist:
    try:
        return Allowlist.parse(settings.webhook_allow, ALLOW_SETTING)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
