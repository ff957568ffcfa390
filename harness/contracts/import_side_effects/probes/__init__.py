"""The probes of the side-effect detector (:mod:`harness.contracts.import_side_effects.detector`), one module per
family.

Each probe snapshots and instruments one area of the process while the detector's block runs, undoes its
instrumentation when the block ends and reports what changed as :class:`~.base.SideEffect` records of its kinds:
``base`` (the effect record, the probe interface and the describing helpers every probe shares), ``modules``
(attributes of the watched modules, ``sys.modules``), ``callables`` (functions swapped in place, class attributes),
``mutable_globals`` (module-level containers changed in place), ``files`` (files under the watched root,
``sys.path``), ``logs`` (log records, logger configuration, warnings), ``environment`` (``os.environ`` reads and
writes), ``processes`` (threads, child processes), ``cuda`` (CUDA initialisation) and ``hooks`` (process-wide hooks).
The detector builds them in a fixed order, which orders the effects of one kind; this package imports none of
them, so that :mod:`harness.contracts.import_side_effects.callable_state` can use ``base`` without an import cycle.
"""
