"""A failing advisory stops at its first failing example; a red is shrunk to its minimal one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.plugin.hypothesis_profiles import advisory_settings


def failing_property() -> tuple[object, list[int]]:
    seen: list[int] = []

    @settings(derandomize=True, max_examples=100, database=None, print_blob=False)
    @given(st.integers(0, 10**6))
    def above_ten_fails(x: int) -> None:
        seen.append(x)
        assert x < 10

    return above_ten_fails, seen


def test_an_advisory_keeps_the_first_failing_example_unshrunk_and_a_red_is_shrunk() -> None:
    advisory, tried = failing_property()
    with advisory_settings(advisory), pytest.raises(AssertionError):
        advisory()
    first_failure = next(x for x in tried if x >= 10)
    assert first_failure > 10 and tried[-1] == first_failure, "the advisory was shrunk"
    assert len(tried) == tried.index(first_failure) + 2, "only the failing example is replayed, once"

    red, shrunk = failing_property()
    with pytest.raises(AssertionError):
        red()
    assert shrunk[-1] == 10 and len(shrunk) > len(tried), "a red keeps full shrinking"


def test_the_tests_own_settings_are_back_after_the_block() -> None:
    test, _ = failing_property()
    before = test._hypothesis_internal_use_settings
    with advisory_settings(test):
        assert test._hypothesis_internal_use_settings is not before
    assert test._hypothesis_internal_use_settings is before
    with advisory_settings(lambda: None):
        pass
