"""``nox -s bench``: rank-side timing of upstream vs the subject's all-reduce (``timing``) and its table and plot
(``report``). May import every other package of ``harness``.
"""
