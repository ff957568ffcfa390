"""petrel: an LLM/RL training framework built on Megatron-Core.

Importing this package (or any of its subpackages) patches nothing, reads no
environment variable, configures no logging and imports no Megatron module.

Megatron-Core adapters live in :mod:`petrel.mcore`:

* :mod:`petrel.mcore.grad_allreduce` -- ``install(chunk_bytes)`` / ``uninstall()``
  for the chunked TP all-reduce of non-tensor-parallel grads.
* :mod:`petrel.mcore.provider` -- ``wrap(provider, args)`` model-provider wrapper.
"""

__all__ = []
