"""The Celery shell around the DAG machine (``reactq.shared.dag``): ``tasks`` (the tasks, the
DAG's lease, the crash limit) and ``drive`` (what each task does)."""
