"""Seeded adapter: installs a trace function for every thread started later, at import."""

import threading


def _trace(frame, event, arg):
    return None


threading.settrace(_trace)
