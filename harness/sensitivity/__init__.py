"""``nox -s sensitivity``: the mutant catalogue, a mutant's edited Megatron text (and a copied package where it edits
more than modules), warm runs of the gate on the mutants, and the kill-rate report. May import every other package
of ``harness``.
"""
