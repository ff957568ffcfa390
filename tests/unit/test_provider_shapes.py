"""Provider call shapes read from a ``get_model`` source: names, keywords, lines, every way a matrix is stale."""

from __future__ import annotations

import re

import pytest

from harness.targets.provider_shapes import ProviderShapeError, derive_calls, derive_shapes, shape_mismatches

GET_MODEL = """
def get_model(model_provider_func, model_type=None, config=None, pg_collection=None):
    def build_model():
        if vp:
            for i in range(2):
                model_provider_func(
                    pre_process=True, post_process=False, vp_stage=i, config=config, pg_collection=pg_collection
                )
        elif encoder_decoder:
            model_provider_func(pre_process=True, post_process=True, add_encoder=True, add_decoder=False)
        else:
            model = model_provider_func(pre_process=True, post_process=True, config=config, pg_collection=pg_collection)
        return model
    return build_model()
"""
RECORDED = {
    "plain": ("pre_process", "post_process", "config", "pg_collection"),
    "virtual_pipeline": ("pre_process", "post_process", "config", "pg_collection", "vp_stage"),
    "encoder_decoder": ("pre_process", "post_process", "add_encoder", "add_decoder"),
}


def test_calls_are_found_in_nested_functions_and_named_by_shape() -> None:
    calls = derive_calls(GET_MODEL, "training.py")
    assert [(c.shape, c.line) for c in calls] == [("virtual_pipeline", 6), ("encoder_decoder", 10), ("plain", 12)]
    assert derive_shapes(calls)["virtual_pipeline"] == (
        "pre_process",
        "post_process",
        "vp_stage",
        "config",
        "pg_collection",
    )


def test_matching_matrix_has_no_mismatch() -> None:
    assert shape_mismatches(derive_calls(GET_MODEL), RECORDED, "training.py") == []


def test_each_kind_of_staleness_names_the_keyword_shape_and_line() -> None:
    recorded = {
        "plain": ("pre_process", "post_process", "pg_collection", "extra"),
        "virtual_pipeline": RECORDED["virtual_pipeline"],
        "dual": ("pre_process", "post_process"),
    }
    problems = shape_mismatches(derive_calls(GET_MODEL), recorded, "training.py")
    assert problems == [
        "training.py:10: Megatron calls the provider as shape 'encoder_decoder' with "
        "['pre_process', 'post_process', 'add_encoder', 'add_decoder']; the matrix records no such shape",
        "training.py:12: Megatron passes keyword 'config' in shape 'plain'; the matrix does not list it",
        "training.py:12: the matrix lists keyword 'extra' in shape 'plain'; Megatron does not pass it",
        "training.py: the matrix records shape 'dual', which get_model() never makes",
    ]


def test_positional_provider_arguments_are_reported() -> None:
    source = "def get_model(provider):\n    provider(True, post_process=True, pre_process=True)\n"
    problems = shape_mismatches(derive_calls(source), {"plain": ("pre_process", "post_process")}, "t.py")
    assert problems == ["t.py:2: the provider gets 1 positional argument(s): not recordable"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def other(p):\n    p()\n", "no module-level function get_model()"),
        ("def get_model():\n    pass\n", "get_model() takes no provider parameter"),
        ("def get_model(p):\n    q(pre_process=True)\n", "never calls its provider 'p'"),
        ("def get_model(p):\n    p(**kw)\n", "p(**...) passes keywords not readable here"),
    ],
)
def test_unreadable_get_model_is_an_error(source: str, message: str) -> None:
    with pytest.raises(ProviderShapeError, match=re.escape(message)):
        derive_calls(source, "t.py")
