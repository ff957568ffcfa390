"""Inner providers as the model-provider family draws them: what the mandatory case may and may not generate."""

from __future__ import annotations

from hypothesis import find, given, settings

from harness.contracts.model_provider import ProviderSpec, freeze_patterns, provider_specs

MEGATRON_016 = ("pre_process", "post_process", "vp_stage", "config", "pg_collection")


@settings(max_examples=200)
@given(provider_specs(positional_only=False, var_keyword=False, names=MEGATRON_016))
def test_an_inner_provider_without_kwargs_names_every_keyword_megatron_passes(spec: ProviderSpec) -> None:
    assert not spec.var_keyword
    assert all(spec.accepts_by_name(name) for name in MEGATRON_016)


@settings(max_examples=200)
@given(provider_specs(positional_only=False, var_keyword=True, names=MEGATRON_016))
def test_an_inner_provider_with_kwargs_need_name_nothing(spec: ProviderSpec) -> None:
    assert spec.var_keyword


def test_unrestricted_inner_providers_still_name_only_some_keywords() -> None:
    """The advisory cases keep drawing providers a framework's own never are: some omit keywords Megatron passes."""
    spec = find(
        provider_specs(positional_only=False, var_keyword=False),
        lambda spec: not spec.accepts_by_name("config"),
        settings=settings(database=None),
    )
    assert not spec.var_keyword


@given(freeze_patterns())
def test_rule_lists_are_absent_or_non_empty(patterns: list[str] | None) -> None:
    assert patterns is None or len(patterns) >= 1
