"""``python -m dispatcher`` is ``reactq``."""

from reactq.dispatcher.cli import main

main()
