"""A framework installed beside a target's Megatron without breaking it.

- :mod:`.framework_install`: the requirements venv (the target's packages, then the framework's), its record and
  report.
- :mod:`.distributions`: what a venv holds, read from its metadata.
- :mod:`.pin_report`: what moved, and which pins of torch and megatron-core were overridden.
- :mod:`.torch_coupled`: dependencies that require torch resolved to releases that accept the target's.
- :mod:`.import_probe`: the venv imports Megatron as the target's does, or what breaks it is left out.
- :mod:`.release_age`: a dependency taken from far back, said with what forced it.
- :mod:`.uv_runs`: the uv commands, with pip's indexes handed over.

May import ``harness.formats`` and ``harness.targets``.
"""
