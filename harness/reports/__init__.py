"""Reports read back from what sessions left behind: the compatibility report (model, findings, summary, Markdown,
HTML) and the api-diff of two targets' fingerprints. May import every other package of ``harness``.
"""
