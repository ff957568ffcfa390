"""The pytest plugins every target session loads (``-p harness.plugin.gate``, ``harness.plugin.quick_exit`` for a
session's end, ``harness.plugin.warnings_summary`` for the terminal's warnings) and the one command that runs them:
what the session has in force (``session_state``), what a failed case becomes (``verdicts``), the records and
``summary.json`` at its end (``records``, ``session_summary``), the table of contract families, the failure-message
helper every case file uses, expected failures and hypothesis profiles.

May import ``harness.formats``, ``harness.targets``, ``harness.subjects`` and ``harness.ranks`` (the warnings plugin
registers a rank start hook).
"""
