"""Seeded adapter: installs a trace function at import."""

import sys


def _trace(frame, event, arg):
    return None


sys.settrace(_trace)
