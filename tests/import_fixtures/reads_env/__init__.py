"""Reads a configuration variable on import."""

import os

FLAG = os.environ.get("CONFORMANCE_PROBE_READ_FLAG", "off")
