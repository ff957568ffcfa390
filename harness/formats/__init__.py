"""Formats shared by several parts of the gate, each written and read by one module: mapping-key validation,
Markdown escaping, JUnit reading, the red section with its repro line, the environment that chooses what a session
checks, ``summary.json``, the "not declared" skip reason, the side-effect kinds, the ``MEGATRON_SYMBOLS``
entries, and the gate's own errors (:mod:`.gate_error`, :mod:`.generator_error`).

Imports nothing else from ``harness`` and nothing outside the standard library.
"""
