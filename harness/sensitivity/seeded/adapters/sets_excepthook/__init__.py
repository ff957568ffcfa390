"""Seeded adapter: replaces the process's exception hook at import."""

import sys


def _excepthook(exc_type, exc, traceback):
    sys.__excepthook__(exc_type, exc, traceback)


sys.excepthook = _excepthook
