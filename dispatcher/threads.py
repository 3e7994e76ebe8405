"""Threads from the dispatcher's side: the submission and reads live with the door
(``reactq.shared.service.threads``)."""

from reactq.shared.service.threads import (
    ORPHAN_AFTER,
    Submitted,
    ThreadBusy,
    repair,
    submit_on_thread,
    thread_store,
    thread_view,
)

__all__ = ["ORPHAN_AFTER", "Submitted", "ThreadBusy", "repair", "submit_on_thread", "thread_store", "thread_view"]
