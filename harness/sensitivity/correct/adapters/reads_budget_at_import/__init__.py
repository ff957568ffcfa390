"""Correct adapter: takes its chunk budget from the subject's budget variable when imported."""

import os

CHUNK_BYTES = int(os.environ.get("MEGATRON_CONFORMANCE_ALLREDUCE_CHUNK_BYTES", str(1 << 30)))
