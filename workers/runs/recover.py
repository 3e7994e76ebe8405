"""How the due watchdog takes up a run's step or a tool call again (its ``Handler``s), and
applies an expired approval's ``on_timeout``.

A member nobody holds is sent again; one whose work keeps killing its workers
(``REACTQ_MAX_TASK_CRASHES``) is ended instead: a run step ends the run ``failed``, a tool
call is answered with an error observation.
"""

from __future__ import annotations

import logging

from reactq.shared.engine.state import TERMINAL_STATUSES
from reactq.shared.errors import RunNotFound
from reactq.shared.stores.due import Member
from reactq.shared.wire import ITERATE, RUNS_QUEUE, TOOL, TOOLS_QUEUE
from reactq.workers.recovery.watchdog import DueWatchdog, Handler
from reactq.workers.runs import approvals, drive, toolcall

log = logging.getLogger(__name__)


def resend_run(wd: DueWatchdog, member: str, m: Member, died: bool) -> None:
    try:
        rec = wd.rt.store.load(m.owner)
    except RunNotFound:
        wd.forget(member)
        return
    if rec.status in TERMINAL_STATUSES:
        wd.forget(member)
        return
    crashes = wd.crashes.run(m.owner, rec.step_no, died)
    if crashes >= wd.crashes.limit:
        log.error("run %s: step %s stopped %s times; ending the run", m.owner, rec.step_no, crashes)
        drive.give_up_run(wd.rt, m.owner, crashes, wd.send)
        return
    log.info("resending run %s step %s%s", m.owner, rec.step_no, " (its worker died)" if died else "")
    wd.send(ITERATE, [m.owner, rec.step_no], RUNS_QUEUE)


def resend_tool(wd: DueWatchdog, member: str, m: Member, died: bool) -> None:
    assert m.call_id is not None
    turn = wd.rt.store.get_turn(m.owner)
    call = toolcall.turn_call(turn, m.call_id)
    if turn is None or call is None:
        wd.forget(member)  # the turn is over (answered, cancelled, expired)
        return
    step_no = int(turn["step_no"])
    crashes = wd.crashes.tool(m.owner, m.call_id, step_no, died)
    if crashes >= wd.crashes.limit:
        log.error("run %s: tool call %s stopped %s times; not sent again", m.owner, m.call_id, crashes)
        toolcall.give_up_tool(wd.rt, m.owner, step_no, call, crashes, wd.send)
        return
    log.info("resending tool call %s of run %s%s", m.call_id, m.owner, " (its worker died)" if died else "")
    wd.send(TOOL, [m.owner, step_no, m.call_id, call.name], TOOLS_QUEUE)


def expire_approval(wd: DueWatchdog, member: str, m: Member, died: bool) -> None:
    """An approval's expiry: ``on_timeout`` applies (its decision removes the member)."""
    assert m.call_id is not None
    if approvals.expire(wd.rt, m.owner, m.call_id, wd.send):
        wd.forget(member)


HANDLERS: dict[str, Handler] = {"run": resend_run, "tool": resend_tool, "approval": expire_approval}
