"""reactq's benchmarks: ``python -m bench`` (or ``make bench``).

Every figure is measured on real processes started here: a Redis-compatible server on a
free port, the scripted OpenAI-compatible server as a subprocess (``bench.script``), and
real ``celery worker`` processes (``-A bench.celeryapp``: reactq's app plus the floor
tasks). Each figure is printed as one JSON line beside a floor measured in the same run;
see ``bench/README.md`` for what each one means and the latest table.
"""
