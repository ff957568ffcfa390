"""The verdict each framework in ``tests/frameworks/`` must get on each target, written before it was run.

A red is expected only where Megatron on that target does something the framework's code breaks; each expected red
names that behaviour and where it lives (the Megatron file and line, or the target contract in ``matrix.yaml`` taken
from Megatron-LM's training loop). A family a framework's declaration cannot describe is expected "not declared",
with the reason. Everything else is green (advisories are listed by the run, never expected here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

TARGETS = ("megatron-0.13", "megatron-0.15", "megatron-0.16", "megatron-0.19")

_FINALIZE_CALLS = {
    "megatron-0.13": "megatron/core/distributed/finalize_model_grads.py:315",
    "megatron-0.15": "megatron/core/distributed/finalize_model_grads.py:452",
    "megatron-0.16": "megatron/core/distributed/finalize_model_grads.py:461",
    "megatron-0.19": "megatron/core/distributed/finalize_model_grads.py:647",
}
"""Where ``finalize_model_grads`` calls ``_allreduce_non_tensor_model_parallel_grads`` by its module global: a
re-bind at import changes what it calls in every process that imports the adapter."""

_CONFIG_SHAPES = {
    "megatron-0.16": ("plain", "virtual_pipeline"),
    "megatron-0.19": ("plain", "virtual_pipeline"),
}
"""Targets whose training loop passes ``config=`` and ``pg_collection=`` to the model provider (matrix.yaml's
provider contract for 0.16 on, from Megatron-LM's ``get_model``)."""

SEGMENT_SPLITTER = (
    "chunk-splitting",
    "its splitter returns element ranges (index, start, stop) that cut grads across chunks; a declaration's "
    "splitter.returns knows pairs, grads and indices only",
)


_NO_PATCH = (
    ("chunk-splitting", "the framework has no chunked all-reduce: its patch replaces other Megatron methods"),
    ("equivalence", "the framework has no chunked all-reduce: its patch replaces other Megatron methods"),
)
_NO_PROVIDER = ("model-provider", "the framework does not wrap Megatron's model provider")
_GET_WD_CALLS = {
    "megatron-0.16": "OptimizerParamScheduler.step passes param_group to get_wd "
    "(megatron/core/optimizer_param_scheduler.py:294)",
    "megatron-0.19": "OptimizerParamScheduler.step passes param_group to get_wd "
    "(megatron/core/optimizer_param_scheduler.py:300)",
}
"""Where Megatron calls ``get_wd`` with the argument 0.15.3's signature has no room for; 0.13 and 0.15 call
``self.get_wd()`` (line 194)."""


@dataclass(frozen=True)
class Expected:
    """One framework on one target: the cases expected red, each with the Megatron behaviour behind it, and the
    families expected not declared, with why."""

    reds: dict[str, str] = field(default_factory=dict)
    not_declared: tuple[tuple[str, str], ...] = ()


def _legacyrl(session: str) -> Expected:
    rebind = (
        f"its adapter's bootstrap imports the patch module, whose body re-binds _allreduce_non_tensor_model_parallel_"
        f"grads and _allreduce_layernorm_grads: finalize_model_grads calls that global ({_FINALIZE_CALLS[session]})"
    )
    reds = {
        "test_importing_the_adapter_with_real_megatron_changes_nothing": rebind,
        "test_importing_the_adapter_as_the_framework_does_changes_nothing": rebind,
    }
    if session in _CONFIG_SHAPES:
        shape = "a fixed (pre_process, post_process, vp_stage) wrapper refuses keyword 'config' (matrix.yaml, provider)"
        reds["test_keywords_reach_the_inner_provider"] = shape
        reds.update({f"test_real_gpt_model_through_the_wrapper[{s}]": shape for s in _CONFIG_SHAPES[session]})
    return Expected(reds)


GREEN = Expected()
EXPECTED: dict[str, dict[str, Expected]] = {
    **{name: dict.fromkeys(TARGETS, GREEN) for name in ("grebe", "heron", "kestrel", "modernrl", "osprey", "plover")},
    "wren": dict.fromkeys(TARGETS, GREEN),
    "legacyrl": {session: _legacyrl(session) for session in TARGETS},
    # Written blind for this issue; expected before their first run.
    "tern": dict.fromkeys(TARGETS, Expected(not_declared=(SEGMENT_SPLITTER,))),
    "finch": dict.fromkeys(TARGETS, Expected(not_declared=(SEGMENT_SPLITTER,))),
    "petrel": dict.fromkeys(TARGETS, GREEN),
    # Megatron symbols other than the all-reduce replaced (attention copies, a router's gating, a config's post-init and
    # defaults, forward on built layers), each expected green with the Megatron call sites written down before its
    # first run. Their mandatory checks are the api-fingerprint family's and the import's: no all-reduce, no provider.
    "owl": dict.fromkeys(TARGETS, Expected(not_declared=(*_NO_PATCH, _NO_PROVIDER))),
    "lark": dict.fromkeys(TARGETS, Expected(not_declared=(*_NO_PATCH, _NO_PROVIDER))),
    "dove": dict.fromkeys(TARGETS, Expected(not_declared=(*_NO_PATCH, _NO_PROVIDER))),
    "swift": dict.fromkeys(TARGETS, Expected(not_declared=(*_NO_PATCH, _NO_PROVIDER))),
    # Written blind against 0.15.3's OptimizerParamScheduler.get_wd (its NOTES.md): a replacement of one argument.
    "wdsched": {
        session: Expected(
            {"test_megatrons_calls_bind_to_the_replacements": _GET_WD_CALLS[session]}
            if session in _GET_WD_CALLS
            else {},
            not_declared=(*_NO_PATCH, _NO_PROVIDER),
        )
        for session in TARGETS
    },
}
