"""Upstream pinned before any subject code: what ``harness.ranks.megatron_state`` sees when a subject re-binds it,
swaps its code or defaults, or does not restore it, on a fake ``megatron`` package (the harness's venv has none)."""

from __future__ import annotations

import functools
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from harness.ranks import megatron_state
from harness.targets.megatron_names import ALIAS_NAME, UPSTREAM_NAME

FINALIZE = textwrap.dedent(
    """
    def _allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None, *, scale=1):
        # reads ddp_config.use_megatron_fsdp
        return ("upstream", tp_group, scale)


    _allreduce_layernorm_grads = _allreduce_non_tensor_model_parallel_grads
    """
)


@pytest.fixture
def finalize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A fake ``megatron`` package (namespace, as megatron-core installs it) with the finalize module, pinned."""
    package = tmp_path / "site" / "megatron" / "core" / "distributed"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "finalize_model_grads.py").write_text(FINALIZE)
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(megatron_state, "_pin", None)
    module = megatron_state.finalize_module()
    assert megatron_state.pin_upstream() is not None
    yield module
    for name in [n for n in sys.modules if n == "megatron" or n.startswith("megatron.")]:
        del sys.modules[name]


def subject_replacement(model, config, tp_group=None, *, scale=1):
    return ("subject", tp_group, scale)


def test_the_pin_holds_upstream_and_its_alias(finalize: ModuleType) -> None:
    pin = megatron_state.pinned_upstream()
    assert [p.name for p in pin.functions] == [UPSTREAM_NAME, ALIAS_NAME]
    assert pin.upstream is finalize._allreduce_non_tensor_model_parallel_grads
    assert pin.problems == ()
    assert pin.when == "at rank start"
    assert megatron_state.upstream_changes(pin) == []
    assert megatron_state.upstream_fsdp_flag() == "use_megatron_fsdp"


def test_a_rebinding_is_named_with_the_module_of_what_was_found(finalize: ModuleType) -> None:
    finalize._allreduce_non_tensor_model_parallel_grads = subject_replacement
    changes = megatron_state.upstream_changes(megatron_state.pinned_upstream())
    assert changes == [f"upstream `{UPSTREAM_NAME}` was replaced before the case ran (by `{__name__}`)"]


def test_a_wrapped_replacement_is_named_with_where_its_code_is_from(finalize: ModuleType) -> None:
    @functools.wraps(finalize._allreduce_non_tensor_model_parallel_grads)
    def wrapped(*args, **kwargs):
        return subject_replacement(*args, **kwargs)

    finalize._allreduce_layernorm_grads = wrapped
    (change,) = megatron_state.upstream_changes(megatron_state.pinned_upstream())
    assert change.startswith(f"upstream `{ALIAS_NAME}` was replaced before the case ran (by `megatron.core.distributed")
    assert f"its code from `{__file__}`" in change


def test_a_swapped_code_is_named_with_its_file(finalize: ModuleType) -> None:
    pin = megatron_state.pinned_upstream()
    original = pin.upstream.__code__
    pin.upstream.__code__ = subject_replacement.__code__
    try:
        changes = megatron_state.upstream_changes(pin)
        # The upstream side still has the pinned code to read the flag from.
        assert megatron_state.upstream_fsdp_flag() == "use_megatron_fsdp"
    finally:
        pin.upstream.__code__ = original
    assert changes == [
        f"upstream `{name}` was replaced before the case ran: its `__code__` was swapped (now from `{__file__}`)"
        for name in (UPSTREAM_NAME, ALIAS_NAME)
    ]


@pytest.mark.parametrize(
    ("attribute", "value", "named"),
    [
        ("__defaults__", (7,), "`__defaults__` were swapped"),
        ("__kwdefaults__", {"scale": 2}, "`__kwdefaults__` changed"),
    ],
)
def test_swapped_defaults_are_named(finalize: ModuleType, attribute: str, value: object, named: str) -> None:
    pin = megatron_state.pinned_upstream()
    original = getattr(pin.upstream, attribute)
    setattr(pin.upstream, attribute, value)
    try:
        (change, _) = megatron_state.upstream_changes(pin)
    finally:
        setattr(pin.upstream, attribute, original)
    assert change.startswith(f"upstream `{UPSTREAM_NAME}` was replaced before the case ran: its {named}")


def test_kwdefaults_edited_in_place_are_seen(finalize: ModuleType) -> None:
    pin = megatron_state.pinned_upstream()
    pin.upstream.__kwdefaults__["scale"] = 3
    try:
        changes = megatron_state.upstream_changes(pin)
    finally:
        pin.upstream.__kwdefaults__["scale"] = 1
    assert len(changes) == 2 and all("`__kwdefaults__` changed" in c for c in changes)


def test_after_uninstall_the_bindings_from_before_install_must_be_back(finalize: ModuleType) -> None:
    pin = megatron_state.pinned_upstream()
    before = megatron_state.bindings(pin)
    finalize._allreduce_non_tensor_model_parallel_grads = subject_replacement  # install()
    after = "and uninstall() did not restore it"
    assert megatron_state.upstream_changes(pin, after, expected=before) == [
        f"upstream `{UPSTREAM_NAME}` was replaced and uninstall() did not restore it (by `{__name__}`)"
    ]
    finalize._allreduce_non_tensor_model_parallel_grads = pin.upstream  # uninstall()
    assert megatron_state.upstream_changes(pin, after, expected=before) == []


def test_a_subject_replaced_before_install_is_not_blamed_on_uninstall(finalize: ModuleType) -> None:
    """A name re-bound at import is the pre-check's red; uninstall() restoring what it found is no second one."""
    finalize._allreduce_non_tensor_model_parallel_grads = subject_replacement
    pin = megatron_state.pinned_upstream()
    before = megatron_state.bindings(pin)
    assert megatron_state.upstream_changes(pin, "and uninstall() did not restore it", expected=before) == []


def test_upstream_bound_calls_the_pinned_object_and_restores(finalize: ModuleType) -> None:
    pin = megatron_state.pinned_upstream()
    finalize._allreduce_non_tensor_model_parallel_grads = subject_replacement
    with megatron_state.upstream_bound(pin):
        assert finalize._allreduce_non_tensor_model_parallel_grads(None, None)[0] == "upstream"
    assert finalize._allreduce_non_tensor_model_parallel_grads is subject_replacement
    assert finalize._allreduce_layernorm_grads is pin.upstream


def test_upstream_pinned_from_outside_megatron_is_a_problem_of_every_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, finalize: ModuleType
) -> None:
    """Something that replaced upstream before the rank started (a .pth file, sitecustomize) is named at pin time."""
    monkeypatch.setattr(megatron_state, "_pin", None)
    finalize._allreduce_non_tensor_model_parallel_grads = subject_replacement
    pin = megatron_state.pin_upstream()
    assert pin is not None
    assert pin.problems == (
        f"upstream `{UPSTREAM_NAME}` was replaced before the gate started the rank (by `{__name__}`)",
    )
    assert megatron_state.upstream_changes(pin)[0] == pin.problems[0]


def test_no_megatron_no_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank pools without Megatron (the harness's own tests) start as before."""
    monkeypatch.setattr(megatron_state, "_pin", None)
    monkeypatch.setitem(sys.modules, "megatron", None)
    assert megatron_state.pin_upstream() is None
    with pytest.raises(RuntimeError, match="megatron is not installed"):
        megatron_state.pinned_upstream()
