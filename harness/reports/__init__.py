"""Reports read back from what sessions left behind: the compatibility matrix (model, Markdown, HTML) and the
api-diff of two targets' fingerprints. May import every other package of ``harness``.
"""
