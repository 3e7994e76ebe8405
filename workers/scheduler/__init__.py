"""The scheduler process (``reactq scheduler``): Celery beat with celery-redbeat's Redis lock,
firing schedules' ticks (``fire``). Any number may run; one holds the lock, the others stand by."""
