"""Megatron state inside a rank process: model-parallel groups per case shape, and facts read off upstream.

Each case runs under its own tensor-parallel size; the groups are created for the case and destroyed after it, so
the next case on the same long-lived rank starts from a clean ``parallel_state``.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
from collections.abc import Iterator
from types import ModuleType
from typing import Any

_FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
UPSTREAM_NAME = "_allreduce_non_tensor_model_parallel_grads"
ALIAS_NAME = "_allreduce_layernorm_grads"


def finalize_module() -> ModuleType:
    """The module (not the re-exported function of the same name)."""
    return importlib.import_module(_FINALIZE_MODULE)


def initialize_task(rank: int, world_size: int, tensor_parallel: int) -> None:
    """Rank-side: (re)create Megatron's model-parallel groups with the given TP size."""
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel)


def destroy_task(rank: int, world_size: int) -> None:
    """Rank-side: tear Megatron's model-parallel groups down."""
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()


def require_tensor_parallel(tensor_parallel: int) -> None:
    """Rank-side guard: a task written for one case shape must not run under another."""
    from megatron.core import parallel_state

    initialized = parallel_state.model_parallel_is_initialized()
    size = parallel_state.get_tensor_model_parallel_world_size() if initialized else 0
    if size != tensor_parallel:
        raise RuntimeError(f"task expects TP size {tensor_parallel}, the rank has {size or 'no model parallel state'}")


@contextlib.contextmanager
def model_parallel(pool: Any, tensor_parallel: int) -> Iterator[Any]:
    """Megatron's model-parallel groups with TP size ``tensor_parallel`` on every rank of ``pool`` for one case.

    Creating the groups costs dozens of rendezvous, so a case shape sets them up once for all its examples rather
    than per example; they are destroyed when the case ends, also on failure (a failed pool is rebuilt anyway).
    """
    pool.run(initialize_task, tensor_parallel)
    try:
        yield pool
    finally:
        if pool.running:
            pool.run(destroy_task)


def upstream_fsdp_flag() -> str:
    """The ``ddp_config`` attribute the installed upstream all-reduce reads, taken from its source.

    Reading it from upstream's own code (rather than from the config dataclass, which on some versions carries both
    the old and the new name) is what lets the equivalence case catch a subject that reads the stale name.
    """
    source = inspect.getsource(getattr(finalize_module(), UPSTREAM_NAME))
    flags = sorted(set(re.findall(r"ddp_config\.(\w+)", source)))
    if len(flags) != 1:
        raise RuntimeError(f"{_FINALIZE_MODULE}.{UPSTREAM_NAME} reads {flags or 'no'} ddp_config flags; expected one")
    return flags[0]
