"""Contract: import side-effect freedom. Importing the adapter package changes nothing; install() changes exactly
the documented Megatron names and uninstall() puts back the very objects it found.

A subject may relax the detector for its adapter by declaring ``IMPORT_SIDE_EFFECTS_ALLOWED`` (kinds from
``harness.contracts.imports.side_effects.KINDS``) and widen it with ``IMPORT_WATCH_MODULES`` (module names to
watch too).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.contracts.imports.fake_modules import build_fakes
from harness.contracts.imports.isolation import load_isolated
from harness.contracts.imports.side_effects import SideEffect, detect, format_effects
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.ranks.megatron_state import ALIAS_NAME, UPSTREAM_NAME, finalize_module
from harness.targets.matrix import Target

FAMILY = family("import-side-effects")
pytestmark = FAMILY.mark()
PATCHED = (UPSTREAM_NAME, ALIAS_NAME)
FAKE_ONLY = {
    "megatron": {},
    "deep_ep": {"Buffer": "class"},
    "torch_memory_saver": {"torch_memory_saver": "function"},
    "transformer_engine": {},
}
# An adapter that costs more to import than all of megatron.core does work at import or pulls in something heavy
# Megatron itself does not need; anything below that is noise on a shared CI machine.
IMPORT_TIME_RATIO_LIMIT = 1.0


def _declared(subject: ModuleType) -> dict[str, object]:
    return {
        "allow": tuple(getattr(subject, "IMPORT_SIDE_EFFECTS_ALLOWED", ())),
        "watch_modules": tuple(getattr(subject, "IMPORT_WATCH_MODULES", ())),
    }


def _effects(effects: list[SideEffect]) -> list[str]:
    """The detail lines of a red: one ``kind name: detail`` line per effect, as ``format_effects`` words them."""
    return format_effects(effects).splitlines()


def test_importing_the_adapter_with_real_megatron_changes_nothing(target: Target, subject: ModuleType) -> None:
    finalize_module()
    effects = detect(lambda: load_isolated(subject.ADAPTER_PACKAGE), **_declared(subject))
    assert not effects, contract_failure(
        target, FAMILY.name, f"importing {FAMILY.symbol} {subject.ADAPTER_PACKAGE} had side effects", _effects(effects)
    )


def test_importing_the_adapter_with_only_fakes_changes_nothing(target: Target, subject: ModuleType) -> None:
    fakes = build_fakes(FAKE_ONLY)
    effects = detect(lambda: load_isolated(subject.ADAPTER_PACKAGE, fakes), **_declared(subject))
    assert not effects, contract_failure(
        target,
        FAMILY.name,
        f"importing {FAMILY.symbol} beside fake megatron/deep_ep/TE had side effects",
        _effects(effects),
    )


def test_install_rebinds_exactly_the_documented_names(target: Target, subject: ModuleType) -> None:
    module = finalize_module()
    originals = {name: getattr(module, name) for name in PATCHED if hasattr(module, name)}
    expected = {f"{module.__name__}.{name}" for name in originals}
    try:
        first = detect(lambda: subject.install(budget_bytes=1 << 20), watch_modules=("megatron",))
        rebound = {e.name for e in first if e.kind == "module-attribute"}
        assert rebound == expected, contract_failure(
            target,
            FAMILY.name,
            f"install() re-bound {sorted(rebound)}, the documented names on this target are {sorted(expected)}",
            _effects(first),
        )
        others = [e for e in first if e.kind not in ("module-attribute", "env-read")]
        assert not others, contract_failure(
            target, FAMILY.name, "install() did more than re-bind the documented names", _effects(others)
        )
        second = detect(lambda: subject.install(budget_bytes=1 << 20), watch_modules=("megatron",))
        assert not [e for e in second if e.kind == "module-attribute"], contract_failure(
            target, FAMILY.name, "a second install() changed Megatron again", _effects(second)
        )
    finally:
        subject.uninstall()
    for name, original in originals.items():
        assert getattr(module, name) is original, contract_failure(
            target,
            FAMILY.name,
            "uninstall() did not put back the original",
            f"after uninstall() {module.__name__}.{name} is {getattr(module, name)!r}, not the original {original!r}",
        )


def test_after_uninstall_finalize_model_grads_reaches_upstream(target: Target, subject: ModuleType) -> None:
    module = finalize_module()
    original = getattr(module, UPSTREAM_NAME)
    subject.install(budget_bytes=1 << 20)
    subject.uninstall()
    finalize = module.finalize_model_grads
    assert finalize.__globals__ is vars(module), contract_failure(
        target, FAMILY.name, "finalize_model_grads no longer lives in the module it is found in"
    )
    called = set(finalize.__code__.co_names)
    reached = [name for name in PATCHED if name in called]
    assert reached, contract_failure(
        target, FAMILY.name, f"finalize_model_grads calls none of {PATCHED}", "upstream moved the call"
    )
    for name in reached:
        assert finalize.__globals__[name] is original, contract_failure(
            target,
            FAMILY.name,
            "uninstall() did not put back upstream's function",
            f"after uninstall() finalize_model_grads resolves {name} to {finalize.__globals__[name]!r}, not "
            f"upstream's {original!r}",
        )


def _cumulative_import_us(code: str) -> dict[str, int]:
    completed = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    times = {}
    for line in completed.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)", line)
        if match:
            times.setdefault(match.group(2), int(match.group(1)))
    return times


def test_adapter_import_time_is_small_next_to_megatron(target: Target, subject: ModuleType, report_dir: Path) -> None:
    package = Path(subject.ADAPTER_PACKAGE)
    if not package.exists():
        pytest.fail(contract_failure(target, FAMILY.name, f"{FAMILY.symbol} {package} is not a path on disk"))
    # One interpreter, Megatron first: its own cumulative time, then the adapter's on top of an imported Megatron.
    setup = f"import sys; import megatron.core; sys.path.insert(0, {str(package.parent)!r}); import {package.stem}"
    times = _cumulative_import_us(setup)
    megatron_us, adapter_us = times["megatron.core"], times[package.stem]
    ratio = adapter_us / megatron_us
    (report_dir / "import_time.json").write_text(
        json.dumps({"megatron_core_us": megatron_us, "adapter_us": adapter_us, "ratio": round(ratio, 4)}, indent=2)
    )
    assert ratio <= IMPORT_TIME_RATIO_LIMIT, contract_failure(
        target,
        FAMILY.name,
        f"importing {package.stem} is slow next to megatron.core",
        f"after megatron.core it costs {adapter_us / 1e6:.2f} s, {ratio:.2f}x megatron.core's "
        f"{megatron_us / 1e6:.2f} s (limit {IMPORT_TIME_RATIO_LIMIT}x)",
    )
