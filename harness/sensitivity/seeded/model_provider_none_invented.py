"""Seeded break: the wrapper passes ``vp_stage=None`` when the caller passed no ``vp_stage``.

The inner provider's own default may not be ``None`` (a provider may default to stage 0, or take ``**kwargs`` and
read "absent" as "no virtual pipeline"), so an invented ``None`` changes what it builds.
"""

from typing import Any

from harness.reference import *  # noqa: F403
from harness.reference import wrap_model_provider as _reference_wrap


def wrap_model_provider(provider: Any, args: Any) -> Any:
    wrapped = _reference_wrap(provider, args)

    def with_vp_stage(pre_process: bool, post_process: bool, **kwargs: Any) -> Any:
        kwargs.setdefault("vp_stage", None)
        return wrapped(pre_process=pre_process, post_process=post_process, **kwargs)

    return with_vp_stage
