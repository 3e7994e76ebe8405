"""The fault suite: `python -m bench.faults [names…]` runs every `f_*.py` module's `run()`."""
