"""Sets an environment variable on import."""

import os

os.environ["CONFORMANCE_PROBE_WRITTEN"] = "1"
