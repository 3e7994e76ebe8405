"""How the due watchdog takes up a DAG again (its ``Handler``): resent, or ended ``failed``
once it has stopped its workers ``REACTQ_MAX_TASK_CRASHES`` times."""

from __future__ import annotations

import logging

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.due import Member
from reactq.shared.wire import DAG_RESUME
from reactq.workers.dags.context import context, send
from reactq.workers.dags import tasks as dag_tasks
from reactq.workers.recovery.watchdog import DueWatchdog, Handler

log = logging.getLogger(__name__)


def resend_dag(wd: DueWatchdog, member: str, m: Member, died: bool) -> None:
    ctx = context()
    try:
        rec = ctx.store.load(m.owner)
    except RunNotFound:
        wd.forget(member)
        return
    if rec.status in TERMINAL_STATUSES or (rec.state is not None and rec.state.phase == "done"):
        wd.forget(member)
        return
    crashes = wd.crashes.dag(m.owner, rec.version, died)
    if crashes >= wd.crashes.limit and rec.state is not None:
        dag_tasks.give_up(ctx, m.owner, crashes)
        return
    log.info("resending DAG %s%s", m.owner, " (its worker died)" if died else "")
    send(DAG_RESUME, [m.owner])


HANDLERS: dict[str, Handler] = {"dag": resend_dag}
