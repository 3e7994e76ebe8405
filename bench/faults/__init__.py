"""The fault suite: ``python -m bench.faults [names…]`` (or ``make faults``).

Each module ``bench/faults/f_<topic>.py`` exposes ``run() -> dict``: bounded in time,
self-contained (it starts its own Redis, scripted LLM, workers and gateway and stops them),
returning its figures. ``__main__`` runs them and prints ONE JSON line ``{name: figures}``.
"""
