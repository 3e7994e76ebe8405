"""The fault suite: ``python -m bench.faults [names…]`` runs every ``f_*.py`` module's
``run() -> dict`` (each bounded in time, starting and stopping its own processes) and
prints one JSON line ``{name: figures, …}``."""
