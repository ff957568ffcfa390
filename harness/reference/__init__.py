"""The reference subject: a clean-room adapter that passes the gate on every pinned target.

Importing this package binds names and nothing else: it does not import Megatron, read the environment, log, or
patch anything. Patching happens only in :func:`install`. A downstream framework replaces this package with its own
module exposing the same names (see docs/ARCHITECTURE.md, "Subject protocol").
"""

from pathlib import Path

from .allreduce import allreduce_non_tensor_model_parallel_grads
from .chunks import split_into_chunks
from .patching import BUDGET_ENV_VAR, install, installed_budget, uninstall
from .provider import wrap_model_provider

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent)

__all__ = [
    "ADAPTER_PACKAGE",
    "BUDGET_ENV_VAR",
    "allreduce_non_tensor_model_parallel_grads",
    "install",
    "installed_budget",
    "split_into_chunks",
    "uninstall",
    "wrap_model_provider",
]
