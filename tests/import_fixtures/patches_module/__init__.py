"""Re-binds a Megatron function on import: the behaviour the gate exists to catch."""

import importlib

# Megatron's package re-exports a function under the submodule's name, so the module is reached through importlib.
finalize_model_grads = importlib.import_module("megatron.core.distributed.finalize_model_grads")


def _allreduce_layernorm_grads(*args: object, **kwargs: object) -> None:
    return None


finalize_model_grads._allreduce_layernorm_grads = _allreduce_layernorm_grads
