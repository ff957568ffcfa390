"""Seeded adapter: reads its chunk budget from the environment at import."""

import os

CHUNK_BYTES = int(os.environ.get("ADAPTER_CHUNK_BYTES", str(1 << 30)))
