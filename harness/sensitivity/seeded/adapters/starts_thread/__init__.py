"""Seeded adapter: starts a background watcher thread at import."""

import threading
import time

threading.Thread(target=time.sleep, args=(0.5,), daemon=True, name="adapter-watcher").start()
