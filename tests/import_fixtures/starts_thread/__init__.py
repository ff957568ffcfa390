"""Starts a background thread on import; ``STOP`` lets a test end it."""

import threading

STOP = threading.Event()
WORKER = threading.Thread(target=STOP.wait, name="conformance-probe-worker", daemon=True)
WORKER.start()
