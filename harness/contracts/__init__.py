"""What the contract families need besides their case files under ``cases/``: grad populations, the rank-side
upstream-vs-subject comparison against a pinned upstream, allocation tracking (memory bound), a deterministic
measure of work (linear cost), generated providers, import isolation, side-effect detection and import time,
fingerprints.

May import ``harness.targets``, ``harness.formats``, ``harness.subjects``, ``harness.plugin``, ``harness.ranks``
and ``harness.source`` (the source reader the api-fingerprint family's from-source verdicts use).
"""
