"""The pytest plugins every target session loads (``-p harness.plugin.gate``, and ``harness.plugin.quick_exit`` for a
session's end), the one command that runs them, the table
of contract families, the failure-message helper every case file uses, expected failures, hypothesis profiles and
subject loading.

May import ``harness.targets`` and ``harness.formats``.
"""
