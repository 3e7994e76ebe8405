"""``python -m dispatcher`` is ``reactq``."""

from dispatcher.cli import main

main()
