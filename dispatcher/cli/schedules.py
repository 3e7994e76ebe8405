"""``reactq schedules create|list|show|pause|resume|delete|trigger``: schedules from the
command line, straight through Redis like ``reactq run`` (no gateway needed).

    reactq schedules create --cron "0 2 * * *" --timezone Europe/Berlin "summarise yesterday's tickets"
    reactq schedules create --interval 3600 --overlap cancel_previous "check the queue"
    reactq schedules show ID --from 2027-03-27T00:00:00Z --count 10

Every command takes ``--json`` (one JSON object on stdout). Exit codes: 0 done, 2 bad usage
(the message names the field) or an unknown schedule id.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import TYPE_CHECKING, Any

import typer
from pydantic import ValidationError
from rich.table import Table

from reactq.dispatcher.cli.common import dispatcher, fail, out, validation_message, whole_ids
from reactq.shared.errors import RequestError, ScheduleNotFound

if TYPE_CHECKING:
    from reactq.dispatcher.schedules import Schedules

app = typer.Typer(name="schedules", help="Runs that start themselves on time (cron or interval).",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_show_locals=False)

JSON = typer.Option(False, "--json", help="print JSON")


def _tenant(value: str) -> str:
    from reactq.shared.tenancy import check_tenant

    try:
        return check_tenant(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


TENANT = typer.Option("default", "--tenant", callback=_tenant,
                      help="the schedule's tenant (schedule ids are per tenant)")


class Overlap(str, Enum):
    skip = "skip"
    allow = "allow"
    cancel_previous = "cancel_previous"


def _service() -> Schedules:
    from reactq.dispatcher.schedules import Schedules

    return Schedules(dispatcher())


def _show(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(view, ensure_ascii=False))
        return
    table = Table(show_header=False, box=None)
    when = f"cron {view['cron']!r} ({view['timezone']})" if view.get("cron") else f"every {view['interval_s']} s"
    for label, value in (("schedule", view["schedule_id"]), ("when", when),
                         ("query", str(view["run"].get("query", ""))[:200]), ("overlap", view["overlap"]),
                         ("paused", "yes" if view["paused"] else "no"), ("last fired", view["last_fired_at"] or "-"),
                         ("last run", view["last_run_id"] or "-"), ("skipped", str(view["skipped"])),
                         ("next", ", ".join(view["next_fire_times"]))):
        table.add_row(label, value)
    out.print(table)


def _call(fn: Any, *args: Any) -> Any:
    """Run a service call: a bad field or an unknown id exits 2 naming it."""
    try:
        return fn(*args)
    except ValidationError as exc:
        fail(f"invalid schedule: {validation_message(exc)}")
    except ScheduleNotFound as exc:
        fail(str(exc))
    except RequestError as exc:
        fail(f"{exc.field}: {exc}" if exc.field else str(exc))


def create(
    query: str = typer.Argument(..., help="the question each run asks"),
    cron: str | None = typer.Option(None, "--cron", help="5 fields, or 6 with seconds first"),
    interval: int | None = typer.Option(None, "--interval", help="every SECONDS instead of a cron"),
    timezone: str = typer.Option("UTC", "--timezone", help="IANA zone of the cron's wall-clock times"),
    model: str | None = typer.Option(None, "--model", help="a model name from the registry"),
    tools: str | None = typer.Option(None, "--tools", help="comma-separated tool allowlist"),
    overlap: Overlap = typer.Option(Overlap.skip, "--overlap", help="a tick while the last run is active"),
    schedule_id: str | None = typer.Option(None, "--id", help="the schedule's id (default: a new one)"),
    paused: bool = typer.Option(False, "--paused", help="create it paused"),
    tenant: str = TENANT,
    as_json: bool = JSON,
) -> None:
    """A new schedule: --cron EXPR or --interval SECONDS, and the QUERY each run asks."""
    from reactq.shared.schedule.models import ScheduleRequest

    run: dict[str, Any] = {"query": query, **({"model": model} if model else {})}
    if tools is not None:
        run["tools"] = [t.strip() for t in tools.split(",") if t.strip()]
    body: dict[str, Any] = {"cron": cron, "interval_s": interval, "timezone": timezone, "run": run,
                            "overlap": overlap.value, "paused": paused}
    if schedule_id is not None:
        body["schedule_id"] = schedule_id
    req = _call(ScheduleRequest.model_validate, body)
    _show(_call(_service().create, req, tenant), as_json)


def list_(as_json: bool = JSON) -> None:
    """Every tenant's schedules."""
    views = _service().list()
    if as_json:
        print(json.dumps({"schedules": views}, ensure_ascii=False))
        return
    table = Table("schedule", "tenant", "when", "query", "paused", "next", "last run", "skipped")
    for v in views:
        when = f"{v['cron']} ({v['timezone']})" if v.get("cron") else f"every {v['interval_s']} s"
        table.add_row(v["schedule_id"], v["tenant"], when, str(v["run"].get("query", ""))[:60], "yes" if v["paused"] else "",
                      v["next_fire_times"][0] if v["next_fire_times"] else "-", v["last_run_id"] or "-",
                      str(v["skipped"]))
    out.print(whole_ids(table, "schedule", "last run"))


def show(
    schedule_id: str = typer.Argument(..., help="the schedule's id"),
    from_: str | None = typer.Option(None, "--from", help="list the fire times after this ISO-8601 instant"),
    count: int = typer.Option(5, "--count", min=1, max=100, help="how many fire times (1-100)"),
    tenant: str = TENANT,
    as_json: bool = JSON,
) -> None:
    """One schedule and its next fire times."""
    from reactq.shared.schedule.times import parse_instant

    after = None
    if from_ is not None:
        try:
            after = parse_instant(from_)
        except ValueError:
            fail("--from must be an ISO-8601 instant, e.g. 2027-03-27T00:00:00Z")
    _show(_call(lambda: _service().get(schedule_id, tenant, after=after, count=count)), as_json)


def pause(schedule_id: str = typer.Argument(..., help="the schedule's id"), tenant: str = TENANT,
          as_json: bool = JSON) -> None:
    """Stop firing (ticks while paused are not caught up)."""
    _show(_call(_service().set_paused, schedule_id, True, tenant), as_json)


def resume(schedule_id: str = typer.Argument(..., help="the schedule's id"), tenant: str = TENANT,
           as_json: bool = JSON) -> None:
    """Fire again, from the first tick after now."""
    _show(_call(_service().set_paused, schedule_id, False, tenant), as_json)


def delete(schedule_id: str = typer.Argument(..., help="the schedule's id"), tenant: str = TENANT,
           as_json: bool = JSON) -> None:
    """Remove a schedule (its runs stay)."""
    _call(_service().delete, schedule_id, tenant)
    if as_json:
        print(json.dumps({"schedule_id": schedule_id, "deleted": True}))
    else:
        out.print(f"deleted schedule {schedule_id}")


def trigger(schedule_id: str = typer.Argument(..., help="the schedule's id"), tenant: str = TENANT,
            as_json: bool = JSON) -> None:
    """Start one run of the schedule now."""
    handle = _call(_service().trigger, schedule_id, tenant)
    if as_json:
        print(json.dumps({"schedule_id": schedule_id, "run_id": handle.run_id}))
    else:
        out.print(f"run {handle.run_id} (watch it: reactq watch {handle.run_id})")


app.command()(create)
app.command("list")(list_)
for command in (show, pause, resume, delete, trigger):
    app.command()(command)

__all__ = ["app"]
