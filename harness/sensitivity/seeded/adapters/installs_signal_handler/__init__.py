"""Seeded adapter: installs a SIGUSR1 handler (to dump its buckets) at import."""

import signal


def _dump_buckets(signum, frame):
    pass


signal.signal(signal.SIGUSR1, _dump_buckets)
