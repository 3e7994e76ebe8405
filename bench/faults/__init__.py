"""The fault suite: ``python -m bench.faults [names…]`` (see ``__main__``)."""
