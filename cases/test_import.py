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
from harness.contracts.imports.side_effects import detect, format_effects
from harness.ranks.megatron_state import ALIAS_NAME, UPSTREAM_NAME, finalize_module
from harness.targets.matrix import Target

pytestmark = pytest.mark.contract("import-side-effects", symbol="ADAPTER_PACKAGE")
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


def _red(target: Target, what: str, effects: object) -> str:
    return f"[{target.session}] import-side-effects: {what}:\n{format_effects(effects)}"  # type: ignore[arg-type]


def test_importing_the_adapter_with_real_megatron_changes_nothing(target: Target, subject: ModuleType) -> None:
    finalize_module()
    effects = detect(lambda: load_isolated(subject.ADAPTER_PACKAGE), **_declared(subject))
    assert not effects, _red(target, f"importing ADAPTER_PACKAGE {subject.ADAPTER_PACKAGE} had side effects", effects)


def test_importing_the_adapter_with_only_fakes_changes_nothing(target: Target, subject: ModuleType) -> None:
    fakes = build_fakes(FAKE_ONLY)
    effects = detect(lambda: load_isolated(subject.ADAPTER_PACKAGE, fakes), **_declared(subject))
    assert not effects, _red(
        target, "importing ADAPTER_PACKAGE beside fake megatron/deep_ep/TE had side effects", effects
    )


def test_install_rebinds_exactly_the_documented_names(target: Target, subject: ModuleType) -> None:
    module = finalize_module()
    originals = {name: getattr(module, name) for name in PATCHED if hasattr(module, name)}
    expected = {f"{module.__name__}.{name}" for name in originals}
    try:
        first = detect(lambda: subject.install(budget_bytes=1 << 20), watch_modules=("megatron",))
        rebound = {e.name for e in first if e.kind == "module-attribute"}
        assert rebound == expected, (
            f"[{target.session}] import-side-effects: install() re-bound {sorted(rebound)}, "
            f"the documented names on this target are {sorted(expected)}\n{format_effects(first)}"
        )
        others = [e for e in first if e.kind not in ("module-attribute", "env-read")]
        assert not others, _red(target, "install() did more than re-bind the documented names", others)
        second = detect(lambda: subject.install(budget_bytes=1 << 20), watch_modules=("megatron",))
        assert not [e for e in second if e.kind == "module-attribute"], _red(
            target, "a second install() changed Megatron again", second
        )
    finally:
        subject.uninstall()
    for name, original in originals.items():
        assert getattr(module, name) is original, (
            f"[{target.session}] import-side-effects: after uninstall() {module.__name__}.{name} is "
            f"{getattr(module, name)!r}, not the original {original!r}"
        )


def test_after_uninstall_finalize_model_grads_reaches_upstream(target: Target, subject: ModuleType) -> None:
    module = finalize_module()
    original = getattr(module, UPSTREAM_NAME)
    subject.install(budget_bytes=1 << 20)
    subject.uninstall()
    finalize = module.finalize_model_grads
    assert finalize.__globals__ is vars(module), "finalize_model_grads no longer lives in the module it is found in"
    called = set(finalize.__code__.co_names)
    reached = [name for name in PATCHED if name in called]
    assert reached, f"[{target.session}] finalize_model_grads calls none of {PATCHED}: upstream moved the call"
    for name in reached:
        assert finalize.__globals__[name] is original, (
            f"[{target.session}] import-side-effects: after uninstall() finalize_model_grads resolves {name} to "
            f"{finalize.__globals__[name]!r}, not upstream's {original!r}"
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
        pytest.fail(f"[{target.session}] import-side-effects: ADAPTER_PACKAGE {package} is not a path on disk")
    # One interpreter, Megatron first: its own cumulative time, then the adapter's on top of an imported Megatron.
    setup = f"import sys; import megatron.core; sys.path.insert(0, {str(package.parent)!r}); import {package.stem}"
    times = _cumulative_import_us(setup)
    megatron_us, adapter_us = times["megatron.core"], times[package.stem]
    ratio = adapter_us / megatron_us
    (report_dir / "import_time.json").write_text(
        json.dumps({"megatron_core_us": megatron_us, "adapter_us": adapter_us, "ratio": round(ratio, 4)}, indent=2)
    )
    assert ratio <= IMPORT_TIME_RATIO_LIMIT, (
        f"[{target.session}] import-side-effects: importing {package.stem} after megatron.core costs "
        f"{adapter_us / 1e6:.2f} s, {ratio:.2f}x megatron.core's {megatron_us / 1e6:.2f} s (limit "
        f"{IMPORT_TIME_RATIO_LIMIT}x)"
    )
