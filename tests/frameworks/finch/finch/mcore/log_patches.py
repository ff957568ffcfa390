"""Harmless, log-only Megatron patch (useful to check the patch machinery)."""

from __future__ import annotations

import functools
import importlib
from typing import List

from .registry import AttrPatch, register_patch

PARALLEL_STATE_MODULE = "megatron.core.parallel_state"


def _log():
    import logging

    return logging.getLogger("finch.mcore.log_patches")


@register_patch(
    "log_model_parallel_init",
    description="log the arguments of megatron.core.parallel_state.initialize_model_parallel",
)
def _log_model_parallel_init_factory(args) -> List[AttrPatch]:
    ps = importlib.import_module(PARALLEL_STATE_MODULE)
    original = ps.initialize_model_parallel

    @functools.wraps(original)
    def initialize_model_parallel(*a, **kw):
        _log().info("finch: megatron initialize_model_parallel(args=%r, kwargs=%r)", a, kw)
        return original(*a, **kw)

    return [AttrPatch(PARALLEL_STATE_MODULE, "initialize_model_parallel", initialize_model_parallel)]
