"""What an install reports (``harness/install/pin_report.py``), read from a venv's metadata: what moved, pins of torch
and megatron-core overridden, and the framework's own megatron-core range as the upgrade being checked."""

from __future__ import annotations

from pathlib import Path

from harness.install.distributions import installed
from harness.install.framework_install import FrameworkInstall
from harness.install.pin_report import moved_packages, overridden_pins
from tests.fake_index import installed_distribution

HELD = {"torch": "2.13.0+cpu", "megatron-core": "0.15.3"}


def test_what_moved_is_one_line_and_the_held_pins_are_never_listed() -> None:
    before = ["numpy==1.26.4", "packaging==26.4", "torch==2.13.0+cpu", "attrs==23.1.0"]
    after = ["numpy==2.4.6", "packaging==26.4", "torch==2.13.0+cpu"]
    assert moved_packages(before, after, HELD) == [
        "moved for the framework's requirements: numpy 1.26.4 → 2.4.6, attrs 23.1.0 → removed"
    ]
    assert moved_packages(before, before, HELD) == []


def test_pins_the_target_does_not_meet_are_overridden_and_the_frameworks_range_is_the_upgrade(tmp_path: Path) -> None:
    site = tmp_path
    installed_distribution(site, "ms-swift", "4.6.0", requires=("numpy", 'megatron-core>=0.16; extra == "megatron"'))
    installed_distribution(site, "peft", "0.17.0", requires=("torch>=1.13", 'torch<2; python_version < "3"'))
    installed_distribution(site, "other", "1.0", requires=("torch==2.11.0", 'megatron-core==0.17.0; extra == "cpu"'))
    installed_distribution(tmp_path, "torch", "2.13.0+cpu", requires=("sympy",))
    assert overridden_pins(installed(tmp_path), HELD, ["ms-swift[megatron]==4.6.0"], "3.11") == [
        "megatron-core 0.15.3 is outside the range `ms-swift` `4.6.0` declares (`>=0.16`): this is the upgrade "
        "being checked",
        "other 1.0 asks for torch==2.11.0: overridden, the target's 2.13.0+cpu stays",
    ]
    assert overridden_pins(installed(tmp_path), HELD, ["ms-swift==4.6.0"], "3.11") == [
        "other 1.0 asks for torch==2.11.0: overridden, the target's 2.13.0+cpu stays"
    ]


def test_the_venv_is_named_by_the_set_and_what_is_left_out() -> None:
    one = FrameworkInstall(("verl==0.9.1",), frameworks=("verl==0.9.1",))
    assert one.key() == FrameworkInstall(("verl==0.9.1",)).key()
    assert one.key() != FrameworkInstall(("verl==0.9.1",), leave_out=("flash-attn",)).key()
    assert FrameworkInstall().empty and not one.empty
