"""``reactq batch-cancel BATCH_ID``: the CLI way to ``POST /v1/batches/{id}/cancel``.

The batch's driver (in the gateway) cancels its runs in flight and ends the lines not
started ``skipped``. Exit 0 once asked, 2 for an unknown batch, 1 if it had already ended.
"""

from __future__ import annotations

from pathlib import Path

import typer

from reactq.dispatcher.batch import BatchStore


def batch_cancel(batch_id: str = typer.Argument(..., help="the id POST /v1/batches returned")) -> None:
    """Cancel an HTTP batch: its runs are cancelled, lines not started are skipped."""
    from reactq.dispatcher.cli import EXIT_FAILED, dispatcher, err, fail, out

    d = dispatcher()
    status = d.redis.hget(d.keys.batch(batch_id), "status")
    if status is None:
        fail(f"no batch with id {batch_id!r} (it may have expired)")
    if status != b"running":
        err.print(f"batch {batch_id} has already ended ({status.decode()})")
        raise typer.Exit(EXIT_FAILED)
    BatchStore(d.redis, d.keys, d.settings.run_ttl_seconds).request_cancel(batch_id)
    out.print(f"batch {batch_id}: cancelling (runs in flight are cancelled, lines not started skipped)")


def limits_cell(spec: object) -> str:
    vals = [getattr(spec, k, None) for k in ("rpm", "tpm", "max_concurrency")]
    return " / ".join(f"{v:,}" if v else "-" for v in vals) if any(vals) else "none"


def use_of(names: list[str]) -> dict[str, str]:
    """``rpm used / tpm used / in flight`` per model from Redis; empty when it is unreachable."""
    import redis as redis_lib

    from reactq.dispatcher.cli import dispatcher, settings
    from reactq.shared.flow.limiter import FlowLimiter

    s = settings()
    if not s.redis_url and not _embedded_running(s.data_dir):
        return {}  # showing the registry must not start the embedded server
    try:
        d = dispatcher(s)
        limiter = FlowLimiter(d.redis, d.keys)
        out = {}
        for name in names:
            u = limiter.usage(name)
            waiting = sum(u["waiting"].values())
            cell = f"{u['rpm_used']} req, {u['tpm_used']:,} tok, {u['in_flight']} in flight"
            if waiting:
                cell += f", {waiting} waiting"
            if u["paused_for_s"]:
                cell += f", paused {u['paused_for_s']:.1f}s"
            out[name] = cell
        return out
    except (redis_lib.RedisError, OSError):
        return {}


def _embedded_running(data_dir: Path) -> bool:
    import json

    from reactq.shared.redisconn import _ping

    try:
        return _ping(int(json.loads((data_dir / "valkey.json").read_text())["port"]))
    except (OSError, ValueError, KeyError):
        return False
