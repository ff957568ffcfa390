"""The pytest plugin every target session loads (``-p harness.plugin.gate``), the one command that runs it, the table
of contract families, the failure-message helper every case file uses, expected failures, hypothesis profiles and
subject loading.

May import ``harness.targets`` and ``harness.formats``.
"""
