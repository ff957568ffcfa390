"""A sweep over ``sys.modules`` re-binds a function wherever a module holds the original (SkyRL's MTP loss patch,
Primus' ``fused_pad_routing_map``): ``scan`` lists each Megatron module that imports the function by value as
replaced at the sweep's line. Megatron-core 0.19.2 imports ``process_mtp_loss`` from ``multi_token_prediction`` by
value in ``models/gpt/gpt_model.py:36`` and ``models/hybrid/hybrid_model.py:30``, and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.source import source_scan, source_verdicts
from harness.source.call_sites import MegatronSource
from harness.source.from_source import versions_of
from harness.source.source_verdicts import framework_verdicts
from harness.source.starter import scanned_replacements
from harness.targets.release_source import release_source

RELEASE = "0.19.2"
CONSUMERS = {
    "megatron.core.models.gpt.gpt_model:process_mtp_loss",
    "megatron.core.models.hybrid.hybrid_model:process_mtp_loss",
}
HEAD = """import sys

import megatron.core.transformer.multi_token_prediction as mtp


def skip_loss(*args, **kwargs):
    return None


def apply():
    original = mtp.process_mtp_loss
"""
SWEEPS = {
    "values-assign": [
        "    for mod in list(sys.modules.values()):",
        '        if getattr(mod, "process_mtp_loss", None) is original:',
        "            mod.process_mtp_loss = skip_loss  # the sweep",
    ],
    "items-setattr": [
        "    for name, module in sys.modules.copy().items():",
        '        if module is not mtp and getattr(module, "process_mtp_loss", None) is original:',
        '            setattr(module, "process_mtp_loss", skip_loss)  # the sweep',
    ],
}
READ_ONLY = [
    "    for mod in list(sys.modules.values()):",
    '        if getattr(mod, "process_mtp_loss", None) is original:',
    "            print(mod)  # the sweep",
]


@pytest.fixture(scope="module")
def megatron() -> Path:
    return release_source(RELEASE).root


def scanned(tmp_path: Path, megatron: Path, sweep: list[str]) -> tuple[set[tuple[str, str]], str]:
    (tmp_path / "fwsweep").mkdir()
    (tmp_path / "fwsweep" / "__init__.py").write_text("")
    lines = [*HEAD.splitlines(), *sweep]
    (tmp_path / "fwsweep" / "mtp_patch.py").write_text("\n".join(lines) + "\n")
    line = next(i for i, text in enumerate(lines, 1) if "# the sweep" in text)
    return scanned_replacements(tmp_path, [megatron]), f"mtp_patch.py:{line}"


@pytest.mark.parametrize("form", sorted(SWEEPS))
def test_a_sweep_replaces_the_function_in_every_megatron_module_holding_it(
    tmp_path: Path, megatron: Path, form: str
) -> None:
    found, place = scanned(tmp_path, megatron, SWEEPS[form])
    assert found == {(place, key) for key in CONSUMERS}


def test_a_loop_over_sys_modules_that_sets_nothing_replaces_nothing(tmp_path: Path, megatron: Path) -> None:
    found, _ = scanned(tmp_path, megatron, READ_ONLY)
    assert found == set()


def test_the_sweep_goes_unread_without_its_rule(
    tmp_path: Path, megatron: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: a loop over ``sys.modules`` taken for any other loop (the rule before) loses every consumer."""
    monkeypatch.setattr(source_scan, "swept_module", lambda loop: None)
    found, _ = scanned(tmp_path, megatron, SWEEPS["values-assign"])
    assert found == set()


DIRECT = "    mtp.process_mtp_loss = skip_loss"


def sweep_verdict(tmp_path: Path, megatron: Path) -> tuple[str, list[str]]:
    """The from-source verdict on ``process_mtp_loss`` of a framework that replaces it on its module and sweeps the
    modules holding it by value."""
    scanned(tmp_path, megatron, [DIRECT, *SWEEPS["items-setattr"]])
    source = MegatronSource(megatron)
    verdicts = framework_verdicts(tmp_path, source, versions_of(source, RELEASE, "2.9.0"))
    found = next(v for v in verdicts if v.symbol == "megatron.core.transformer.multi_token_prediction:process_mtp_loss")
    return found.verdict, found.findings


def test_a_sweep_lets_the_replacement_reach_the_calls_through_names_bound_by_value(
    tmp_path: Path, megatron: Path
) -> None:
    verdict, findings = sweep_verdict(tmp_path, megatron)
    assert not [f for f in findings if "bound by value" in f], findings
    assert verdict != "red"


def test_without_reading_the_sweep_the_calls_bound_by_value_are_unreached(
    tmp_path: Path, megatron: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: the from-source verdicts blind to the sweep say gpt_model's and hybrid_model's calls, bound by
    value at their imports, are not reached."""
    monkeypatch.setattr(source_verdicts, "swept_names", lambda tree: set())
    verdict, findings = sweep_verdict(tmp_path, megatron)
    assert verdict == "red" and [f for f in findings if "bound by value" in f], findings
