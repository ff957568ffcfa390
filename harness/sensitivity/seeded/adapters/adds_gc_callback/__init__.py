"""Seeded adapter: hooks the garbage collector at import."""

import gc


def _on_collect(phase, info):
    pass


gc.callbacks.append(_on_collect)
