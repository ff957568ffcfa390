"""Seeded break: the wrapper drops ``vp_stage``, so every virtual-pipeline stage builds the first stage's layers."""

from typing import Any

from harness.reference import *  # noqa: F403
from harness.reference import wrap_model_provider as _reference_wrap


def wrap_model_provider(provider: Any, args: Any) -> Any:
    wrapped = _reference_wrap(provider, args)

    def without_vp_stage(pre_process: bool, post_process: bool, **kwargs: Any) -> Any:
        kwargs.pop("vp_stage", None)
        return wrapped(pre_process=pre_process, post_process=post_process, **kwargs)

    return without_vp_stage
