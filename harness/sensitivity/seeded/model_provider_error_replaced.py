"""Seeded break: the wrapper replaces the inner provider's error with its own, hiding the original type."""

from typing import Any

from harness.reference import *  # noqa: F403
from harness.reference import wrap_model_provider as _reference_wrap


def wrap_model_provider(provider: Any, args: Any) -> Any:
    wrapped = _reference_wrap(provider, args)

    def reporting(pre_process: bool, post_process: bool, **kwargs: Any) -> Any:
        try:
            return wrapped(pre_process=pre_process, post_process=post_process, **kwargs)
        except Exception as err:
            raise RuntimeError(f"model provider failed: {err}") from err

    return reporting
