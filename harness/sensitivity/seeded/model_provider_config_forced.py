"""Seeded break: the wrapper forwards ``config`` whether or not the inner provider can take it."""

from typing import Any

from harness.reference import *  # noqa: F403
from harness.reference.provider import accepted_keywords, freeze_by_patterns


def wrap_model_provider(provider: Any, args: Any) -> Any:
    accepted = accepted_keywords(provider)

    def wrapped_provider(pre_process: bool, post_process: bool, **kwargs: Any) -> Any:
        forwarded = {k: v for k, v in kwargs.items() if k == "config" or accepted is None or k in accepted}
        model = provider(pre_process=pre_process, post_process=post_process, **forwarded)
        freeze_by_patterns(model, args.freeze_patterns, args.train_only_patterns)
        return model

    return wrapped_provider
