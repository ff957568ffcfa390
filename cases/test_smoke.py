"""Smoke: the venv holds exactly the target's pins, and the Megatron imported is the one installed.

Runs first in every target session; without it a mis-installed venv would run every other case against the wrong
Megatron and report green.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.targets.installed_versions import installed_versions, megatron_origin, pin_mismatches
from harness.targets.matrix import MEGATRON_DISTRIBUTION, Target

FAMILY = family("smoke")
pytestmark = FAMILY.mark()


def test_installed_versions_are_the_pins(target: Target) -> None:
    problems = pin_mismatches(target, installed_versions(), megatron_origin())
    assert not problems, contract_failure(target, FAMILY.name, "the venv does not hold the pins", problems)


def test_megatron_is_imported_from_the_installed_distribution(target: Target) -> None:
    import megatron.core

    files = importlib.metadata.distribution(MEGATRON_DISTRIBUTION).files or []
    init = next((f for f in files if str(f).replace("\\", "/") == "megatron/core/__init__.py"), None)
    assert init is not None, contract_failure(
        target, FAMILY.name, f"{MEGATRON_DISTRIBUTION} does not ship megatron/core"
    )
    installed_path = Path(init.locate()).resolve()
    imported_path = Path(megatron.core.__file__).resolve()
    assert imported_path == installed_path, contract_failure(
        target,
        FAMILY.name,
        "megatron.core is not imported from the installed distribution",
        f"it is imported from {imported_path}, not from the installed {MEGATRON_DISTRIBUTION} at {installed_path}",
    )


def test_torch_build_is_recorded_as_torch_reports_it(target: Target) -> None:
    import torch

    recorded = installed_versions()["torch"]
    assert recorded == torch.__version__, contract_failure(
        target,
        FAMILY.name,
        "the torch build label (+cpu, +cu130, ...) is not read from the installed torch",
        f"summary.json would record torch {recorded}, but the torch imported is {torch.__version__}",
    )
