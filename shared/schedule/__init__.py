"""Schedules: runs that start themselves on time (pure parts: fire times, the request model,
what a tick does). Redis access is in ``reactq.shared.stores.schedules``; the process that
fires ticks is ``reactq.workers.scheduler``."""
