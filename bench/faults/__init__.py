"""The fault suite: ``python -m bench.faults [names…]`` runs every ``bench/faults/f_*.py``."""
