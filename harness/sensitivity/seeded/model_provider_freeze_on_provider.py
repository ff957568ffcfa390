"""Seeded break: the freeze rules are applied when the wrapper is made, to the provider instead of the model.

A provider function has no parameters, so nothing is frozen, and the rules set on ``args`` afterwards never apply.
"""

import argparse
from typing import Any

from harness.reference import *  # noqa: F403
from harness.reference import wrap_model_provider as _reference_wrap
from harness.reference.provider import freeze_by_patterns


def wrap_model_provider(provider: Any, args: Any) -> Any:
    if hasattr(provider, "named_parameters"):
        freeze_by_patterns(provider, args.freeze_patterns, args.train_only_patterns)
    return _reference_wrap(provider, argparse.Namespace())
