"""Seeded break: a wrapper with the fixed signature ``(pre_process, post_process, vp_stage=None)``.

It forwards ``vp_stage`` only when given and accepted and applies the freeze rules, so the call shapes of
megatron-core 0.14 and 0.15 pass; the 0.16 caller adds ``config=``/``pg_collection=`` (and 0.13's encoder-decoder
branch ``add_encoder=``/``add_decoder=``), which this signature refuses with a TypeError.
"""

from typing import Any

from harness.reference import *  # noqa: F403
from harness.reference.provider import accepted_keywords, freeze_by_patterns


def wrap_model_provider(provider: Any, args: Any) -> Any:
    accepted = accepted_keywords(provider)

    def wrapped_provider(pre_process: bool, post_process: bool, vp_stage: Any = None) -> Any:
        given = {} if vp_stage is None else {"vp_stage": vp_stage}
        forwarded = {k: v for k, v in given.items() if accepted is None or k in accepted}
        model = provider(pre_process=pre_process, post_process=post_process, **forwarded)
        freeze_by_patterns(model, args.freeze_patterns, args.train_only_patterns)
        return model

    return wrapped_provider
