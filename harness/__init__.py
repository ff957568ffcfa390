"""Machinery of the megatron-conformance gate: matrix, subject loading, pytest plugin, rank pool, reports."""
