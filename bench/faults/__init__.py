"""The fault suite: ``python -m bench.faults [names…]`` (or ``make faults``).

Each module ``f_<topic>.py`` exposes ``run() -> dict``: bounded in time, self-contained
(starts its own servers and workers, stops them), returning its figures. The runner prints
one JSON line ``{name: figures, …}``.
"""
