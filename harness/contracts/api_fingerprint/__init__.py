"""Fingerprints of the Megatron symbols a subject declares, and the checks the api-fingerprint contract makes.

Downstream adapters lean on Megatron's *private* names (``_allreduce_non_tensor_model_parallel_grads``,
``_get_main_grad_attr``) and on dataclass fields read by name (the FSDP flag on ``DistributedDataParallelConfig``).
Public-API checkers skip exactly those: they stop at underscore names and never see a field read through ``getattr``.
So the subject names every Megatron symbol it touches in ``MEGATRON_SYMBOLS``, and the gate fingerprints each one
with ``inspect`` and ``ast`` inside the target's venv.

- :mod:`.inspection`: the fingerprint of a symbol in the running interpreter.
- :mod:`.checks`: the api-fingerprint contract's checks of a declaration against a target's fingerprints.
- :mod:`.cache`: fingerprints cached per installed Megatron; ``python -m harness.contracts.api_fingerprint`` writes them
  from inside a target venv.
- :mod:`.patch_effects`: what a live apply binds, and whether a found object is the declared replacement.
- :mod:`.session_source`: the from-source verdicts a session reads (the reader itself is :mod:`harness.source`).

Nothing is re-exported here: import a name from the module that owns it. May import ``harness.formats``,
``harness.targets``, ``harness.subjects`` and ``harness.source``.
"""
