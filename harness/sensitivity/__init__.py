"""``nox -s sensitivity``: the mutant catalogue, mutated Megatron copies, runs of the gate on each mutant, and the
kill-rate report. May import every other package of ``harness``.
"""
