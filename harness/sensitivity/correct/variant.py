"""The reference subject's all-reduce with its collective reached another way.

A fresh copy of ``harness.reference.allreduce`` is executed whose ``torch`` global is a view of torch in which
``torch.distributed.all_reduce`` is the function given: the copy's code then calls that function as a name bound when
the variant was imported, never looking ``torch.distributed.all_reduce`` up at call time. ``install`` binds the copy
where the reference's ``install`` binds its own function.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from harness.reference import allreduce as reference_allreduce
from harness.reference import megatron_api, patching
from harness.reference.patching import PATCHED_NAMES

_counter = itertools.count()


class _View:
    """``base`` with some attributes replaced; every other attribute is the base's own."""

    def __init__(self, base: Any, **replaced: Any) -> None:
        self._base = base
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


def reference_allreduce_with(all_reduce: Callable[..., Any]) -> ModuleType:
    """A copy of the reference's all-reduce module whose collectives go through ``all_reduce``."""
    name = f"harness.reference._variant_allreduce_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, reference_allreduce.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.torch = _View(torch, distributed=_View(torch.distributed, all_reduce=all_reduce))
    return module


def installer(replacement: Callable[..., Any]) -> Callable[..., None]:
    """An ``install`` that does what the reference's does, then binds ``replacement`` in its place."""

    def install(budget_bytes: int | None = None) -> None:
        patching.install(budget_bytes)
        module = megatron_api.finalize_module()
        for name in PATCHED_NAMES:
            if getattr(module, name, None) is reference_allreduce.allreduce_non_tensor_model_parallel_grads:
                setattr(module, name, replacement)

    return install
