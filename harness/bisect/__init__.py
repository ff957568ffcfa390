"""Bisect: which build of megatron-core on the package index first turned the subject's cases red.

The builds between two versions come from :mod:`harness.targets.index_builds` in history order; each step runs the
named cases on one build as a one-target matrix (``megatron-bisect``), its verdict kept per build, subject and gate
code; the search narrows to the last green and the first red build, and the report shows the source of the Megatron
symbols behind the red in both, diffed. May import ``formats``, ``targets``, ``subjects``, ``plugin``,
``reports`` and ``source``.
"""
