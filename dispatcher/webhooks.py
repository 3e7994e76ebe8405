"""Webhooks at the door: the check lives with the door (``reactq.shared.service.webhooks``)."""

from reactq.shared.service.webhooks import ALLOW_SETTING, allowlist, check_webhook

__all__ = ["ALLOW_SETTING", "allowlist", "check_webhook"]
