"""Seeded adapter: arms a one-hour real-time timer at import (the kind that patches Megatron when it fires)."""

import signal

signal.setitimer(signal.ITIMER_REAL, 3600)
