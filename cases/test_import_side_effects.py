"""Contract: import side-effect freedom. Loading the subject and importing its adapter package change nothing;
install() changes exactly the documented Megatron names, uninstall() puts back the very objects it found, and the
first calls of the subject's functions patch nothing. Across the whole session, Megatron's functions are the same
after every case as before the first (``harness/contracts/import_side_effects/session_watch.py``).

Every observation starts from the same state, whatever ran before in the process: the Megatron modules the subject
declares are imported first, and the block runs in a private working directory that the file probe watches.

A subject may waive effects of its adapter per name, never per kind alone, with ``IMPORT_SIDE_EFFECTS_ALLOWED``
(``{kind: [name patterns]}``, kinds from ``harness.contracts.import_side_effects.detector.KINDS``, and
``log-message`` patterns of a log record's message); every waiver used is written to ``summary.json`` and shown in the
report. ``IMPORT_WATCH_MODULES`` names more modules to watch. The variable the subject names as its budget's
(``BUDGET_ENV_VAR``, a declaration's ``budget.env``) may be read: such a read is listed as a waiver, with the file and
line that read it, and never reported.

Beside fakes of Megatron, the fakes of real functions and classes carry the installed target's signatures
(:mod:`harness.contracts.import_side_effects.fake_modules`). An adapter whose import still raises there cannot be
observed there: its side-effect case is skipped, and the advisory case says why, with its repro line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.contracts.import_side_effects.detector import (
    SideEffect,
    allowance_for,
    detect_with_allowances,
    format_effects,
)
from harness.contracts.import_side_effects.dry_import import load_subject_afresh, megatron_modules_loaded_by
from harness.contracts.import_side_effects.fake_modules import build_fakes
from harness.contracts.import_side_effects.import_time import ImportTimeError, measure_import_times
from harness.contracts.import_side_effects.isolation import (
    adapter_import_root,
    import_as_the_framework,
    load_isolated,
)
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.ranks.early_start import ON_RANKS
from harness.ranks.megatron_state import finalize_module
from harness.ranks.pool import RankPoolError
from harness.source.symbol_table import DeclarationError, read_declaration
from harness.subjects.framework_imports import megatron_restored, missing_dependency
from harness.subjects.loading import SubjectRef
from harness.subjects.promises import budget_env_var
from harness.targets.matrix import Target
from harness.targets.megatron_names import ALIAS_NAME, UPSTREAM_NAME

FAMILY = family("import-side-effects")
pytestmark = [FAMILY.mark(), ON_RANKS]  # every observation starts after a dry import in a rank
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


def _declared(subject: ModuleType) -> dict[str, Any]:
    return {
        "allow": dict(getattr(subject, "IMPORT_SIDE_EFFECTS_ALLOWED", {}) or {}),
        "watch_modules": tuple(getattr(subject, "IMPORT_WATCH_MODULES", ())),
    }


def _budget_waiver(subject: ModuleType) -> str:
    """How a waiver of the budget variable's read names what allowed it: the declaration's key, or the module's."""
    return "budget.env" if getattr(subject, "DECLARATION", None) is not None else "BUDGET_ENV_VAR"


_megatron_baseline: dict[str, list[str]] = {}
"""Per subject spec, the Megatron modules a fresh process has imported once it loaded the subject and its adapter."""


@pytest.fixture
def observe(
    subject: ModuleType,
    subject_ref: SubjectRef,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_waiver: Callable[..., None],
) -> Callable[..., list[SideEffect]]:
    """Run a block under the detector from the same starting point whatever ran before in the process: the Megatron
    modules the subject declares, and those loading it imports (a dry run in a throwaway rank,
    :mod:`~harness.contracts.import_side_effects.dry_import`), already imported, so Megatron's own first-import
    effects are never the adapter's; a private working directory (the file probe's root, never the repository or
    ``reports/``); effects the subject's declaration waives, and reads of its budget variable, are recorded as
    waivers, the others returned."""
    if subject_ref.spec not in _megatron_baseline:
        _megatron_baseline[subject_ref.spec] = megatron_modules_loaded_by(subject_ref)
    for module in [*_declared_modules(subject), *_megatron_baseline[subject_ref.spec]]:
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    private = tmp_path / "cwd"
    private.mkdir()
    monkeypatch.chdir(private)
    declared = _declared(subject)
    budget = budget_env_var(subject)

    def is_budget_read(effect: SideEffect) -> bool:
        return budget is not None and effect.kind == "env-read" and effect.name == budget

    def run(block: Callable[[], object], **options: Any) -> list[SideEffect]:
        # What the block bound in Megatron (or torch) is reported, then put back, also where it raised midway: no
        # red leaks into the next observation, and no patch of an import is the next one's starting point.
        restore = contextlib.nullcontext() if options.pop("keep", False) else megatron_restored()
        with restore:
            effects, waived = detect_with_allowances(block, **{**declared, "file_root": private, **options})
        allowances = options.get("allow", declared["allow"])
        for effect in [*waived, *filter(is_budget_read, effects)]:
            allowed_by = _budget_waiver(subject) if is_budget_read(effect) else allowance_for(effect, allowances)
            record_waiver(effect.kind, effect.name, allowed_by or "?", effect.detail)
        return [effect for effect in effects if not is_budget_read(effect)]

    return run


def _declared_modules(subject: ModuleType) -> list[str]:
    """The Megatron modules named in the subject's ``MEGATRON_SYMBOLS`` (none when it declares none)."""
    try:
        declaration = read_declaration(subject)
    except DeclarationError:
        return []
    return sorted({member.split(":", 1)[0] for entry in declaration for member in entry.members})


def _effects(effects: list[SideEffect]) -> list[str]:
    """The detail lines of a red: one ``kind name: detail`` line per effect, as ``format_effects`` words them."""
    return format_effects(effects).splitlines()


MEGATRON_STATE_KINDS = frozenset(
    {"module-attribute", "function-state", "class-attribute", "mutable-global", "cuda-init"}
)
"""Effects on what Megatron runs, the mandatory part of every observation: a name Megatron calls re-bound (in its
modules, ``torch.distributed``'s or a declared library's), a function's code or defaults, a class attribute or
dataclass default, a module global changed in place, and a CUDA context made at import (Megatron picks each rank's
device after the imports, so that context lands on the first GPU for every rank). Every other kind (environment
reads, logging, warnings, threads, processes, files, ``sys.path``, process hooks, modules imported) changes nothing
Megatron does: an advisory, in its own case."""

_observed: dict[str, list[SideEffect]] = {}
"""Each observation's effects, kept for the advisory twin of its case, so one import is observed once."""


def _megatron_state(effects: list[SideEffect]) -> list[SideEffect]:
    return [effect for effect in effects if effect.kind in MEGATRON_STATE_KINDS]


def _other_effects(effects: list[SideEffect]) -> list[SideEffect]:
    return [effect for effect in effects if effect.kind not in MEGATRON_STATE_KINDS]


def _observed_once(key: str, observe: Callable[..., list[SideEffect]], block: Callable[[], object]) -> list[SideEffect]:
    if key not in _observed:
        _observed[key] = observe(block)
    return _observed[key]


def test_loading_the_subject_changes_nothing(
    target: Target, subject_ref: SubjectRef, observe: Callable[..., list[SideEffect]]
) -> None:
    effects = _megatron_state(_observed_once("load", observe, lambda: load_subject_afresh(subject_ref)))
    assert not effects, contract_failure(
        target, FAMILY.name, f"loading the subject {subject_ref.name} changed Megatron", _effects(effects)
    )


@pytest.mark.advisory
def test_loading_the_subject_has_no_other_effects(
    target: Target, subject_ref: SubjectRef, observe: Callable[..., list[SideEffect]]
) -> None:
    effects = _other_effects(_observed_once("load", observe, lambda: load_subject_afresh(subject_ref)))
    assert not effects, contract_failure(
        target, FAMILY.name, f"loading the subject {subject_ref.name} had side effects", _effects(effects)
    )


def test_importing_the_adapter_with_real_megatron_changes_nothing(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    finalize_module()
    block = _importing(target, subject.ADAPTER_PACKAGE, lambda: load_isolated(subject.ADAPTER_PACKAGE))
    effects = _megatron_state(_observed_once("real", observe, block))
    assert not effects, contract_failure(
        target, FAMILY.name, f"importing {FAMILY.symbol} {subject.ADAPTER_PACKAGE} changed Megatron", _effects(effects)
    )


@pytest.mark.advisory
def test_importing_the_adapter_with_real_megatron_has_no_other_effects(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    finalize_module()
    block = _importing(target, subject.ADAPTER_PACKAGE, lambda: load_isolated(subject.ADAPTER_PACKAGE))
    effects = _other_effects(_observed_once("real", observe, block))
    assert not effects, contract_failure(
        target, FAMILY.name, f"importing {FAMILY.symbol} {subject.ADAPTER_PACKAGE} had side effects", _effects(effects)
    )


GATE_PACKAGES = ("harness", "cases", "tests")
"""Top packages of the gate itself, imported before any case: for an adapter inside them, a framework's import runs
the adapter's own package again, never the gate's parents."""


def _framework_import(subject: ModuleType) -> tuple[str, Path, str]:
    """The dotted name a framework imports its adapter by (``verl.models.mcore.patch``), the folder it is found from,
    and the package whose modules run again: the framework's top package, or the adapter's own inside the gate."""
    root, dotted = adapter_import_root(subject.ADAPTER_PACKAGE)
    return dotted, root, dotted if dotted.partition(".")[0] in GATE_PACKAGES else dotted.partition(".")[0]


def _importing(target: Target, name: str, block: Callable[[], object]) -> Callable[[], object]:
    """``block``, an import of ``name``, where a module it needs that the venv lacks fails the case in one line
    naming that module and the key that installs it (never a traceback, never a green)."""

    def run() -> object:
        try:
            return block()
        except ModuleNotFoundError as err:
            if not err.name:
                raise
            pytest.fail(
                contract_failure(target, FAMILY.name, f"importing {name} failed", [missing_dependency(name, err.name)]),
                pytrace=False,
            )

    return run


def test_importing_the_adapter_as_the_framework_does_changes_nothing(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    """``import <adapter_package>`` by its real dotted name, its parents' ``__init__`` included, as the framework's
    own code runs it; judged by the adapter's own rule: what it does to Megatron is red."""
    dotted, root, rerun = _framework_import(subject)
    finalize_module()
    block = _importing(target, dotted, lambda: import_as_the_framework(dotted, root, rerun))
    effects = _megatron_state(_observed_once("dotted", observe, block))
    assert not effects, contract_failure(
        target, FAMILY.name, f"import {dotted} (parents' __init__ included) changed Megatron", _effects(effects)
    )


@pytest.mark.advisory
def test_importing_the_adapter_as_the_framework_does_has_no_other_effects(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    dotted, root, rerun = _framework_import(subject)
    finalize_module()
    block = _importing(target, dotted, lambda: import_as_the_framework(dotted, root, rerun))
    effects = _other_effects(_observed_once("dotted", observe, block))
    assert not effects, contract_failure(
        target, FAMILY.name, f"import {dotted} (parents' __init__ included) had side effects", _effects(effects)
    )


def _load_beside_fakes(subject: ModuleType) -> Callable[[], object]:
    """The adapter's load beside fakes of Megatron, DeepEP, torch_memory_saver and TE; a fake of a function or class
    the installed Megatron has carries its signature (the real modules are those imported now, finalize_model_grads
    and the declared ones among them)."""
    finalize_module()
    fakes = build_fakes(FAKE_ONLY, originals=dict(sys.modules))
    return lambda: load_isolated(subject.ADAPTER_PACKAGE, fakes)


def _not_observed(subject: ModuleType, err: Exception) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{subject.ADAPTER_PACKAGE} could not be observed beside fakes: {type(err).__name__}: {first}".rstrip(": ")


def test_importing_the_adapter_with_only_fakes_changes_nothing(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    """An import that raises beside the fakes changed what it changed on the way to an error no real Megatron
    raises: no verdict here (the advisory case below names the exception), never a side-effect red."""
    effects = _megatron_state(_observed_beside_fakes(subject, observe))
    assert not effects, contract_failure(
        target,
        FAMILY.name,
        f"importing {FAMILY.symbol} beside fake megatron/deep_ep/TE changed Megatron",
        _effects(effects),
    )


@pytest.mark.advisory
def test_importing_the_adapter_with_only_fakes_has_no_other_effects(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    effects = _other_effects(_observed_beside_fakes(subject, observe))
    assert not effects, contract_failure(
        target,
        FAMILY.name,
        f"importing {FAMILY.symbol} beside fake megatron/deep_ep/TE had side effects",
        _effects(effects),
    )


def _observed_beside_fakes(subject: ModuleType, observe: Callable[..., list[SideEffect]]) -> list[SideEffect]:
    """The effects of the import beside fakes; a skip naming the exception where that import raises."""
    try:
        return _observed_once("fakes", observe, _load_beside_fakes(subject))
    except Exception as err:
        pytest.skip(f"{_not_observed(subject, err)} (see test_the_adapter_can_be_observed_beside_fakes)")


@pytest.mark.advisory
def test_the_adapter_can_be_observed_beside_fakes(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    """Whether the adapter imports where no real Megatron, DeepEP or TE is: where it cannot, its import was observed
    only with the real Megatron. An advisory: an adapter may well need what the fakes cannot give (a dataclass's
    fields, a data flag), and its import beside the real Megatron is judged all the same
    (``test_importing_the_adapter_with_real_megatron_changes_nothing``)."""
    load = _load_beside_fakes(subject)
    try:
        observe(load)
    except Exception as err:
        pytest.fail(contract_failure(target, FAMILY.name, _not_observed(subject, err)))


@pytest.mark.role("patch")
def test_install_rebinds_exactly_the_documented_names(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    module = finalize_module()
    originals = {name: getattr(module, name) for name in PATCHED if hasattr(module, name)}
    expected = {f"{module.__name__}.{name}" for name in originals}
    undone: list[SideEffect] = []
    try:
        first = observe(lambda: subject.install(budget_bytes=1 << 20), watch_modules=("megatron",), keep=True)
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
        # A second install may bind a fresh replacement (a closure over the new budget): Megatron calls whatever is
        # bound. What counts is that one uninstall() then still puts upstream back, checked below.
        subject.install(budget_bytes=1 << 20)
    finally:
        undone = observe(subject.uninstall, watch_modules=("megatron",), keep=True)
    for name, original in originals.items():
        assert getattr(module, name) is original, contract_failure(
            target,
            FAMILY.name,
            "uninstall() did not put back the original",
            f"after uninstall() {module.__name__}.{name} is {getattr(module, name)!r}, not the original {original!r}",
        )
    others = [e for e in undone if not (e.kind == "module-attribute" and e.name in expected)]
    assert not others, contract_failure(
        target, FAMILY.name, "uninstall() did more than put back the documented names", _effects(others)
    )


class _OneRank:
    """A process group of one rank: the replacement's first call returns before any collective."""

    def size(self) -> int:
        return 1

    def rank(self) -> int:
        return 0


def test_first_calls_of_the_subject_change_nothing(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    """A subject that patches lazily, on the first call of one of its functions, is red here or, when another case
    called it first, in the session watch after that case."""
    effects = _megatron_state(_observed_first_calls(subject, observe))
    assert not effects, contract_failure(
        target, FAMILY.name, "the first calls of the subject's functions changed Megatron", _effects(effects)
    )


@pytest.mark.advisory
def test_first_calls_of_the_subject_have_no_other_effects(
    target: Target, subject: ModuleType, observe: Callable[..., list[SideEffect]]
) -> None:
    effects = _other_effects(_observed_first_calls(subject, observe))
    assert not effects, contract_failure(
        target, FAMILY.name, "the first calls of the subject's functions had side effects", _effects(effects)
    )


def _observed_first_calls(subject: ModuleType, observe: Callable[..., list[SideEffect]]) -> list[SideEffect]:
    def first_calls() -> None:
        # Whether each call succeeds is other families' business; what it changed on the way is this one's. A
        # declared subject has only the callables of the roles it declares.
        calls = {
            "split_into_chunks": lambda split: split([], [], 1 << 20),
            "wrap_model_provider": lambda wrap: wrap(
                lambda pre_process=True, post_process=True: None, argparse.Namespace()
            )(True, True),
            "allreduce_non_tensor_model_parallel_grads": lambda reduce: reduce(
                [], argparse.Namespace(), tp_group=_OneRank()
            ),
        }
        for name, call in calls.items():
            if hasattr(subject, name):
                with contextlib.suppress(Exception):
                    call(getattr(subject, name))

    return _observed_once("first-calls", lambda block: observe(block, watch_modules=("megatron",)), first_calls)


@pytest.mark.role("patch")
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


@pytest.mark.advisory
def test_adapter_import_time_is_small_next_to_megatron(target: Target, subject: ModuleType, report_dir: Path) -> None:
    try:
        root, name = adapter_import_root(subject.ADAPTER_PACKAGE)
    except ImportError as err:
        pytest.fail(contract_failure(target, FAMILY.name, f"{FAMILY.symbol} cannot be found", str(err)))
    # Megatron's import in a fresh interpreter, then the adapter's on top of an imported Megatron (see import_time).
    try:
        times = measure_import_times(root, name)
    except (ImportTimeError, RankPoolError) as err:
        pytest.fail(contract_failure(target, FAMILY.name, f"the import time of {name} cannot be measured", str(err)))
    megatron_us, adapter_us, ratio = times.megatron_core_us, times.adapter_us, times.ratio
    (report_dir / "import_time.json").write_text(
        json.dumps({"megatron_core_us": megatron_us, "adapter_us": adapter_us, "ratio": round(ratio, 4)}, indent=2)
    )
    assert ratio <= IMPORT_TIME_RATIO_LIMIT, contract_failure(
        target,
        FAMILY.name,
        f"importing {name} is slow next to megatron.core",
        f"after megatron.core it costs {adapter_us / 1e6:.2f} s, {ratio:.2f}x megatron.core's "
        f"{megatron_us / 1e6:.2f} s (limit {IMPORT_TIME_RATIO_LIMIT}x)",
    )
