"""Seeded adapter: registers an exit hook at import."""

import atexit


def _flush_buckets():
    pass


atexit.register(_flush_buckets)
