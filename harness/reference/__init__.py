"""The reference subject: a clean-room adapter that passes the gate on every pinned target.

Importing this package binds names and nothing else: it does not import Megatron, read the environment, log, or
patch anything. Patching happens only in :func:`install`. A downstream framework replaces this package with its own
module exposing the same names (see docs/ARCHITECTURE.md, "Subject protocol").
"""

from pathlib import Path

from .allreduce import allreduce_non_tensor_model_parallel_grads
from .budget import BUDGET_ENV_VAR
from .chunks import split_into_chunks
from .patching import install, installed_budget, uninstall
from .provider import wrap_model_provider

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent)

_FINALIZE = "megatron.core.distributed.finalize_model_grads"
_PARALLEL_STATE = "megatron.core.parallel_state"
_DDP_CONFIG = "megatron.core.distributed.distributed_data_parallel_config:DistributedDataParallelConfig"
_REPLACED = "replaces with allreduce_non_tensor_model_parallel_grads"
# Every Megatron symbol this package touches (format: harness/source/symbol_table.py). The
# api-fingerprint contract checks that each exists on the target and that the source uses nothing undeclared;
# `nox -s api-diff` diffs them.
MEGATRON_SYMBOLS = {
    f"{_FINALIZE}:_allreduce_non_tensor_model_parallel_grads": _REPLACED,
    f"{_FINALIZE}:_allreduce_layernorm_grads": f"{_REPLACED}, optional",
    f"{_FINALIZE}:finalize_model_grads": "relies",
    f"{_FINALIZE}:_get_main_grad_attr": "calls",
    f"{_FINALIZE}:_unshard_if_dtensor": "calls",
    f"{_FINALIZE}:_reshard_if_dtensor": "calls",
    f"{_FINALIZE}:get_attr_wrapped_model": "calls",
    f"{_FINALIZE}:get_tensor_model_parallel_group_if_none | {_PARALLEL_STATE}:get_tensor_model_parallel_group": "calls",
    _DDP_CONFIG: "reads",
    f"{_DDP_CONFIG}.use_megatron_fsdp | {_DDP_CONFIG}.use_custom_fsdp": "reads",
}

__all__ = [
    "ADAPTER_PACKAGE",
    "BUDGET_ENV_VAR",
    "MEGATRON_SYMBOLS",
    "allreduce_non_tensor_model_parallel_grads",
    "install",
    "installed_budget",
    "split_into_chunks",
    "uninstall",
    "wrap_model_provider",
]
