"""Contract: API fingerprint. Every Megatron symbol the subject touches is declared in ``MEGATRON_SYMBOLS``, exists on
the target, and has a signature the subject's use of it fits.

- The subject's source uses nothing undeclared (imports, modules named to ``importlib.import_module``, attributes
  and ``getattr`` on them; see ``harness.source.source_scan.scan_sources``).
- Each non-optional entry exists here; for alternatives, at least one member.
- A function the subject replaces: the replacement accepts every call upstream's signature accepts (parameter names
  in order, defaults where upstream has them), so any caller can call it instead on this target (an advisory: a
  mismatch no Megatron call makes breaks nothing Megatron does).
- A function the subject calls: at least one of the subject's call shapes binds to upstream's signature.
- A symbol the subject replaces, against Megatron's own calls of it in the installed source
  (:mod:`harness.source.call_sites`): each call binds to the replacement, and where a call unpacks
  the result, the replacement returns that many values. Advisories: a replaced symbol none of whose calls the source
  reveals (``forward``, reached through ``nn.Module.__call__``) or whose returned count its source does not decide,
  and keywords Megatron passes that the replacement takes in ``**kwargs`` and never reads.
- A function whose body the subject copied (``UPSTREAM_BODY_HASHES``, opt-in): the installed body still hashes as
  declared, so upstream adding a rule to code the subject re-implements turns this red even where no case's
  population exercises the rule. A subject that declares none skips the case, saying so.
- A replacement declared as a copy of a release's function (``COPIED_FROM``): an advisory shows the unified diff of
  upstream's body between that release and this target, also written under ``reports/<session>/copies/``.

The fingerprint of the declared symbols on this target is written to ``reports/<session>/fingerprint.json``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.contracts.api_fingerprint.cache import write_json
from harness.contracts.api_fingerprint.checks import (
    changed_copies,
    machine_bound,
    missing_symbols,
    replacement_of,
    replacement_problems,
    resolved_member,
    unbound_calls,
)
from harness.contracts.api_fingerprint.inspection import fingerprint_symbols, parameters, signature_text
from harness.contracts.api_fingerprint.patch_effects import (
    NOT_APPLIED_HERE,
    bound_kinds,
    bound_to,
    captured_replacements,
    namespace_changes,
    owner_of,
    restore,
    snapshot,
    upstream_kind,
)
from harness.contracts.api_fingerprint.session_source import SessionSource, session_verdicts
from harness.contracts.instance_patch import instance_patch_task
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.ranks.cpu_gpt import tiny_config_fields
from harness.ranks.early_start import ON_RANKS
from harness.ranks.megatron_state import model_parallel
from harness.ranks.pool import get_pool
from harness.source.call_sites import MegatronCall, MegatronSource, calls_in_replacement
from harness.source.copies import body_diff, definition, diff_summary, shown
from harness.source.framework_patches import read_framework
from harness.source.from_source import versions_of
from harness.source.replacement_fit import (
    binding_problem,
    callable_of,
    dropped_keywords,
    returned_count,
)
from harness.source.source_scan import (
    CallSite,
    SourceScan,
    scan_sources,
    subject_files,
    undeclared_uses,
)
from harness.source.source_verdicts import call_skipped, is_megatron_owner, judge, megatron_calls_of
from harness.source.symbol_table import (
    BODY_HASHES_NAME,
    DeclarationError,
    Declared,
    declared_symbols,
    dotted,
    read_body_hashes,
    read_copied_from,
    read_declaration,
)
from harness.subjects.framework_source import framework_source_root
from harness.subjects.loading import SubjectRef
from harness.subjects.upstream_state import upstream_restored
from harness.targets.installed_versions import installed_versions
from harness.targets.matrix import Target
from harness.targets.release_source import ReleaseSourceError, release_source

FAMILY = family("api-fingerprint")
pytestmark = FAMILY.mark()


@pytest.fixture(scope="module")
def declaration(target: Target, subject: ModuleType) -> list[Declared]:
    try:
        return read_declaration(subject)
    except DeclarationError as err:
        pytest.fail(contract_failure(target, FAMILY.name, f"{FAMILY.symbol} cannot be read", str(err)))


@pytest.fixture(scope="module")
def fingerprints(target: Target, declaration: list[Declared], report_dir: Path) -> dict[str, dict[str, Any]]:
    prints = fingerprint_symbols(declared_symbols(declaration))
    write_json(report_dir / "fingerprint.json", {"target": target.session, "symbols": prints})
    return prints


@pytest.fixture(scope="module")
def replacements(
    subject: ModuleType, declaration: list[Declared], fingerprints: dict[str, dict[str, Any]], record_finding
) -> dict[str, tuple[str, Any, str | None]]:
    """Each replaced symbol present here: how the declaration names its replacement, the replacement, and why it
    cannot be had (None when it can). A bare ``replaces`` is what the declared apply binds there, captured. Of an
    apply of several functions where some raise, each raise is a finding, and a symbol none of the rest bound is
    not applied here: it is read from source."""
    found: dict[str, tuple[str, Any, str | None]] = {}
    bare = []
    on_instances = set(getattr(subject, "REPLACED_ON_INSTANCES", ()))
    for entry in (e for e in declaration if e.usage == "replaces"):
        symbol = resolved_member(entry, fingerprints)
        if symbol is None or symbol in on_instances:
            continue
        if entry.replacement is None:
            bare.append(symbol)
        else:
            found[symbol] = (entry.replacement, *replacement_of(subject, entry.replacement))
    several = len(getattr(getattr(subject, "DECLARATION", None), "symbols_patch", {}).get("apply", ())) > 1
    # One apply captures what every function bound: the bare entries' replacements, and, of an apply of several,
    # what each replaced symbol holds after it (a symbol none of them bound is read from source).
    captured = captured_replacements(subject, list(dict.fromkeys([*bare, *(found if several else ())])))
    for symbol in bare:
        found[symbol] = ("what the declared apply binds", *captured[symbol])
    candidates = [s for s, (name, _, problem) in found.items() if problem is None or s in bare]
    raised, unbound = _apply_raised(subject, candidates, captured) if several else ([], {})
    for line in raised:
        record_finding(FAMILY.name, f"the declared apply's {line}: what it bound before is checked applied")
    for symbol, why in unbound.items():
        found[symbol] = (found[symbol][0], found[symbol][1], why)
    return found


def _apply_raised(
    subject: ModuleType, symbols: list[str], captured: dict[str, tuple[Any, str | None]]
) -> tuple[list[str], dict[str, str]]:
    """What the functions of a declared apply of several raised in the apply that ``captured`` what they bound (a
    framework's patch that needs Transformer Engine, applied on a CPU), one line each, and which of ``symbols`` none
    of them bound, with why."""
    raised = list(subject.SYMBOLS_PATCH.raised)
    if not raised or not symbols:
        return [], {}
    why = f"{NOT_APPLIED_HERE}the declared apply's {'; '.join(raised)}"
    return raised, {symbol: why for symbol in symbols if captured.get(symbol, (None, None))[0] is None}


@pytest.fixture(scope="module")
def scan(subject: ModuleType) -> SourceScan:
    return scan_sources(subject_files(subject))


@pytest.mark.advisory
def test_declaration_covers_every_megatron_use_in_the_source(
    target: Target, declaration: list[Declared], scan: SourceScan
) -> None:
    undeclared: dict[str, list[str]] = {}
    for use in undeclared_uses(scan, declaration):
        undeclared.setdefault(" or ".join(use.paths), []).append(f"{use.file}:{use.line}")
    listed = [f"{path} (at {', '.join(places)})" for path, places in undeclared.items()]
    assert not undeclared, contract_failure(
        target, FAMILY.name, f"the subject uses Megatron symbols it does not declare in {FAMILY.symbol}", listed
    )


def test_declared_symbols_exist(
    target: Target, declaration: list[Declared], fingerprints: dict[str, dict[str, Any]], record_finding
) -> None:
    """Every non-optional declared symbol exists here. One that only Transformer Engine completes (its extension
    classes are stand-ins without it) is not checked on a CPU machine, and a finding says so."""
    for entry in declaration:
        absent = [m for m in entry.members if not fingerprints[m]["exists"]]
        if absent and len(absent) == len(entry.members) and all(machine_bound(m) for m in absent):
            record_finding(
                FAMILY.name, f"{entry.key}: not checked here: Megatron defines it only with Transformer Engine"
            )
    problems = missing_symbols(declaration, fingerprints)
    assert not problems, contract_failure(target, FAMILY.name, "declared symbols missing on this target", problems)


@pytest.mark.advisory
def test_replacements_accept_every_call_upstream_accepts(
    target: Target,
    fingerprints: dict[str, dict[str, Any]],
    replacements: dict[str, tuple[str, Any, str | None]],
) -> None:
    """Every call upstream's signature admits, Megatron's or anyone's: an advisory, since what Megatron itself calls
    is checked call by call (``test_megatrons_calls_bind_to_the_replacements``)."""
    problems = []
    for symbol, (name, function, problem) in replacements.items():
        upstream = fingerprints[symbol].get("parameters")
        if upstream is None:
            continue
        if problem is not None:
            problems.append(f"{symbol}: {problem}")
            continue
        replacement = parameters(function)
        if replacement is None:
            problems.append(f"{symbol}: {name} has no inspectable signature")
            continue
        problems += [
            f"{symbol} {signature_text(upstream)} replaced by {name}{signature_text(replacement)}: {p}"
            for p in replacement_problems(upstream, replacement)
        ]
    assert not problems, contract_failure(target, FAMILY.name, "replacements do not fit upstream's signature", problems)


def test_every_replacement_can_be_had(target: Target, replacements: dict[str, tuple[str, Any, str | None]]) -> None:
    """The replacement each ``replaces`` entry names exists (or the declared apply binds one): what every other
    check of a replaced symbol is made against."""
    problems = [
        f"{symbol}: {problem}"
        for symbol, (_, _, problem) in replacements.items()
        if problem is not None and not problem.startswith(NOT_APPLIED_HERE)
    ]
    assert not problems, contract_failure(target, FAMILY.name, "replacements cannot be had", problems)


@pytest.fixture(scope="module")
def megatron_source() -> MegatronSource:
    return MegatronSource.installed()


@dataclasses.dataclass(frozen=True)
class Replaced:
    """A replaced symbol present here whose replacement can be had, and Megatron's own uses of it."""

    symbol: str
    name: str
    """How the declaration names the replacement."""
    function: Any
    calls: list[MegatronCall]
    """Megatron's calls of it (its reads, for a property), those inside other replaced symbols left out and the
    calls the replacements of those make in."""
    kind: str
    """How the patch binds it (how Megatron defines it, where no [symbols_patch] says): ``function``, ``method``,
    ``staticmethod``, ``classmethod``, ``property`` or ``value`` (:func:`descriptor_kind`)."""


@pytest.fixture(scope="module")
def megatron_calls(
    subject: ModuleType, replacements: dict[str, tuple[str, Any, str | None]], megatron_source: MegatronSource
) -> list[Replaced]:
    """Each replaced symbol present here whose replacement is a function (or a property, a static or class method
    wrapping one), with Megatron's own uses of it. A replaced value (a dataclass default) has none."""
    replaced = list(replacements)
    usable = {
        s: (name, f) for s, (name, f, problem) in replacements.items() if problem is None and callable(callable_of(f))
    }
    upstream = {symbol: upstream_kind(symbol) for symbol in usable}
    kinds = {**upstream, **bound_kinds(subject, list(usable))}
    found = []
    for symbol, (name, function) in usable.items():
        calls, _ = megatron_calls_of(megatron_source, symbol, set(replaced))
        if _is_method(symbol):
            method = symbol.rpartition(".")[2]
            for other, (_, caller) in usable.items():
                if other != symbol and _is_method(other):
                    calls += calls_in_replacement(callable_of(caller), method, f"{other} (replaced)")
        found.append(Replaced(symbol, name, function, calls, kinds[symbol]))
    return found


def _is_method(symbol: str) -> bool:
    return "." in symbol.partition(":")[2]


def test_megatrons_calls_bind_to_the_replacements(target: Target, megatron_calls: list[Replaced]) -> None:
    """Each call binds to the replacement as the patch binds it: a plain function set on a class gets the instance
    first where upstream's static method did not; a property is read, never called."""
    problems = [
        f"{each.symbol}: Megatron's {'read' if call.read else 'call'} at {call.describe()} does not bind to "
        f"{each.name}: {reason}"
        for each in megatron_calls
        for call in each.calls
        if (reason := binding_problem(each.function, call, each.kind)) is not None
    ]
    assert not problems, contract_failure(
        target, FAMILY.name, "Megatron's own calls do not fit the replacements", problems
    )


def test_megatron_unpacks_what_the_replacements_return(target: Target, megatron_calls: list[Replaced]) -> None:
    problems = []
    for each in megatron_calls:
        count = returned_count(each.function)
        for call in (c for c in each.calls if c.unpacks is not None and count is not None and c.unpacks != count):
            problems.append(
                f"{each.symbol}: {call.place} ({call.caller.split(':')[-1]}) unpacks {call.unpacks} values, "
                f"{each.name} returns {count}"
            )
    assert not problems, contract_failure(
        target, FAMILY.name, "Megatron unpacks another number of values than the replacements return", problems
    )


def test_megatrons_calls_reach_the_replacements(
    target: Target,
    replacements: dict[str, tuple[str, Any, str | None]],
    megatron_calls: list[Replaced],
) -> None:
    """A Megatron module that bound the replaced function by value (``from x import f``, or ``g = f`` at module
    level) and calls it through that name keeps calling Megatron's own after the patch, unless the declaration
    replaces that binding too."""
    replaced = set(replacements)
    problems = [
        f"{each.symbol}: {call.place} ({call.caller.split(':')[-1]}) calls {call.name}, bound by value at "
        f"{call.bound_at}: the patch re-binds {dotted(each.symbol)}, so this call still reaches Megatron's own"
        for each in megatron_calls
        for call in each.calls
        if call.bound_at is not None and f"{call.caller.split(':')[0]}:{call.name}" not in replaced
    ]
    assert not problems, contract_failure(
        target, FAMILY.name, "Megatron calls a replaced function through a name the patch does not reach", problems
    )


def test_the_patch_binds_each_replacement_and_undo_restores_exactly(
    target: Target, subject: ModuleType, replacements: dict[str, tuple[str, Any, str | None]]
) -> None:
    """Applied as declared (``[symbols_patch]``), each replaced name resolves, where Megatron looks it up, to the
    declared replacement; undone, every owner's namespace holds what it held before, name for name."""
    apply = getattr(subject, "apply_replacements", None)
    if apply is None:
        pytest.skip("the subject has no [symbols_patch], the apply that binds its replaced symbols: nothing to apply")
    if getattr(subject, "REPLACED_ON_INSTANCES", ()):
        pytest.skip(f"the declared apply patches a built model: {ON_INSTANCES_CASE} checks it")
    undo = getattr(subject, "undo_replacements", None)
    chunked = getattr(subject, "allreduce_non_tensor_model_parallel_grads", None)
    checked = [
        (symbol, name, replacement)
        for symbol, (name, replacement, problem) in replacements.items()
        if problem is None and replacement is not chunked
    ]
    owners = {symbol: owner_of(symbol) for symbol, _, _ in checked}
    saved = snapshot(owner for owner, _ in owners.values())
    problems = []
    with upstream_restored():
        try:
            try:
                apply()
            except Exception as err:
                problems.append(f"the declared apply raised {type(err).__name__}: {err}")
            for symbol, name, replacement in checked if not problems else ():
                owner, attribute = owners[symbol]
                found = getattr(owner, attribute, None)
                if not bound_to(found, replacement):
                    problems.append(f"{symbol}: after apply, Megatron's lookup finds {found!r:.120}, not {name}")
            if undo is not None and not problems:
                undo()
                problems += [f"after undo, {change}" for change in namespace_changes(saved)]
        finally:
            restore(saved)
    assert not problems, contract_failure(
        target, FAMILY.name, "the declared patch of the replaced symbols does not bind or undo as declared", problems
    )


def test_megatrons_config_constructs_with_the_patch_applied(
    target: Target, subject: ModuleType, replacements: dict[str, tuple[str, Any, str | None]]
) -> None:
    """A patched field default or ``__post_init__`` of a Megatron config dataclass: with the declared patch applied,
    the ``TransformerConfig`` the CPU GPT is built from (TP 2 + sequence parallel, with and without qk-layernorm)
    still constructs. Every field the patch reads or sets is a declared symbol, whose existence is checked apart."""
    apply = getattr(subject, "apply_replacements", None)
    configs = [symbol for symbol in replacements if _of_a_dataclass(symbol)]
    if apply is None or not configs or getattr(subject, "REPLACED_ON_INSTANCES", ()):
        pytest.skip("no replaced symbol of a Megatron config dataclass with a declared [symbols_patch]")
    from megatron.core.transformer.transformer_config import TransformerConfig

    saved = snapshot([TransformerConfig, *(owner_of(symbol)[0] for symbol in replacements)])
    problems = []
    with upstream_restored():
        try:
            apply()
            for qk_layernorm in (False, True):
                fields = tiny_config_fields(2, qk_layernorm)
                try:
                    TransformerConfig(**fields)
                except Exception as err:
                    shown = ", ".join(f"{k}={v!r}" for k, v in fields.items())
                    problems.append(f"TransformerConfig({shown}) raised {type(err).__name__}: {err}")
        finally:
            restore(saved)
    assert not problems, contract_failure(
        target, FAMILY.name, "Megatron's config does not construct with the declared patch applied", problems
    )


ON_INSTANCES_CASE = "test_a_method_swapped_on_built_instances_is_reached_on_the_real_step"


@ON_RANKS
def test_a_method_swapped_on_built_instances_is_reached_on_the_real_step(
    target: Target, subject: ModuleType, subject_ref: SubjectRef
) -> None:
    """``forward`` swapped on every built ``TransformerLayer``: Megatron calls it through ``nn.Module.__call__``, so
    the patch is applied to a real GPTModel and the step taken (:mod:`harness.contracts.instance_patch`)."""
    if not getattr(subject, "REPLACED_ON_INSTANCES", ()):
        pytest.skip("the subject swaps no method on built instances ([symbols_patch] instances)")
    with model_parallel(get_pool(2, "gloo"), 2) as pool:
        reports = pool.run(instance_patch_task, subject_ref)
    problems = [p for r in reports for p in r.problems]
    shape = "GPTModel TP 2 + SP, gloo"
    assert not problems, contract_failure(
        target, FAMILY.name, f"a method swapped on built instances, on the real step ({shape})", problems
    )


def _of_a_dataclass(symbol: str) -> bool:
    owner, _ = owner_of(symbol)
    return isinstance(owner, type) and dataclasses.is_dataclass(owner)


@pytest.mark.advisory
def test_no_megatron_name_holds_a_replaced_function_by_value(
    target: Target, replacements: dict[str, tuple[str, Any, str | None]], megatron_source: MegatronSource
) -> None:
    """A by-value binding Megatron never calls breaks nothing Megatron does today; a caller added later would
    bypass the patch."""
    replaced = set(replacements)
    held = [
        f"{symbol}: bound by value at {binding.place} as {binding.module}.{binding.alias}, never called there"
        for symbol in sorted(replaced)
        for binding in megatron_source.bindings_of(symbol)
        if not binding.called and f"{binding.module}:{binding.alias}" not in replaced
    ]
    assert not held, contract_failure(
        target, FAMILY.name, "Megatron holds a replaced function under a name the patch does not reach", held
    )


@pytest.mark.advisory
def test_what_megatron_does_with_each_replacement_is_decided(target: Target, megatron_calls: list[Replaced]) -> None:
    """A replaced method whose calls the source does not reveal is checked by no call site (a module-level function
    is called by its name, so none found means Megatron does not call it); a count of returned values the
    replacement's source does not decide is checked against no unpacking call."""
    undecided = []
    for each in megatron_calls:
        unpacking = [call.place for call in each.calls if call.unpacks is not None]
        if not each.calls and _is_method(each.symbol):
            undecided.append(
                f"{each.symbol}: no call of it found in Megatron's source (reached through nn.Module.__call__, the "
                f"dataclass machinery, or an object only known at run time): no call site checks {each.name}"
            )
        elif unpacking and returned_count(each.function) is None:
            undecided.append(
                f"{each.symbol}: {', '.join(unpacking)} unpack its result; how many values {each.name} returns is not "
                "decided"
            )
    assert not undecided, contract_failure(
        target, FAMILY.name, "what Megatron does with a replacement could not be decided", undecided
    )


@pytest.mark.advisory
def test_keywords_megatron_passes_are_read_by_the_replacements(target: Target, megatron_calls: list[Replaced]) -> None:
    dropped = [
        f"{each.symbol}: {keyword!r}, passed by {', '.join(c.place for c in passing)}, is dropped by {each.name}"
        for each in megatron_calls
        for keyword, passing in dropped_keywords(each.function, each.calls).items()
    ]
    assert not dropped, contract_failure(
        target, FAMILY.name, "keywords Megatron passes are taken in **kwargs and never read", dropped
    )


def test_subject_calls_bind_to_upstream_signatures(
    target: Target,
    declaration: list[Declared],
    fingerprints: dict[str, dict[str, Any]],
    scan: SourceScan,
    subject_ref: SubjectRef,
    record_finding,
) -> None:
    """Each call of a declared Megatron function binds its signature here, except a call the framework's own check
    (a version comparison, ``hasattr``, an import that fails) keeps from running on this target: a finding names it."""
    skipped = functools.cache(lambda: _skipped_calls(subject_ref))
    problems = []
    for symbol in declared_symbols(declaration):
        upstream = fingerprints[symbol].get("parameters")
        calls = [call for call in scan.calls if call.path == dotted(symbol)]
        if upstream is None or not calls:
            continue
        failures = []
        for call, reason in unbound_calls(upstream, calls):
            place = skipped()(call)
            if place is None:
                failures.append((call, reason))
            else:
                record_finding(
                    FAMILY.name, f"{symbol}: the call at {call.file}:{call.line} is not made here, by {place}"
                )
        if failures:
            shapes = "; ".join(f"{call.describe()}: {reason}" for call, reason in failures)
            problems.append(f"{symbol} {signature_text(upstream)}: no call shape of the subject binds: {shapes}")
    assert not problems, contract_failure(
        target, FAMILY.name, "the subject's calls do not fit upstream's signature", problems
    )


def _skipped_calls(subject_ref: SubjectRef) -> Callable[[CallSite], str | None]:
    """For a declared framework: where its own check keeps a call from running on this target (None: it runs)."""
    declaration = subject_ref.declaration
    if declaration is None:
        return lambda call: None
    try:
        root = framework_source_root(declaration)
    except ReleaseSourceError:
        return lambda call: None
    framework = read_framework(root, is_megatron_owner)
    versions = installed_versions()
    found = versions_of(MegatronSource.installed(), versions["megatron-core"] or "0", versions["torch"] or "0")
    return lambda call: call.source and call_skipped(framework, found, call.source, call.line)


def test_copied_upstream_bodies_are_unchanged(target: Target, subject: ModuleType) -> None:
    try:
        copied = read_body_hashes(subject)
    except DeclarationError as err:
        pytest.fail(contract_failure(target, FAMILY.name, f"{BODY_HASHES_NAME} cannot be read", str(err)))
    if not copied:
        pytest.skip(f"the subject declares no {BODY_HASHES_NAME}")
    problems = changed_copies(copied, fingerprint_symbols(copied))
    assert not problems, contract_failure(
        target, FAMILY.name, "upstream code the subject copied is no longer what it copied", problems
    )


@pytest.mark.advisory
def test_upstream_bodies_are_what_each_copy_was_taken_from(
    target: Target,
    subject: ModuleType,
    declaration: list[Declared],
    megatron_source: MegatronSource,
    report_dir: Path,
) -> None:
    """What upstream changed in each function since the subject's copy of it was taken (``COPIED_FROM``): the
    unified diff of the release's body against this target's, in the message and under ``copies/``. Advisory: a
    changed body is what to review, not proof of a break; the body-hash case is the red where one is declared."""
    try:
        copied = read_copied_from(subject, declaration)
    except DeclarationError as err:
        pytest.fail(contract_failure(target, FAMILY.name, "COPIED_FROM cannot be read", str(err)))
    if not copied:
        pytest.skip("the subject names no release its replacements were copied from (COPIED_FROM): nothing to diff")
    here = installed_versions()["megatron-core"]
    folder = report_dir / "copies"
    findings, records = [], []
    for symbol, release in copied.items():
        record = {"symbol": symbol, "copied_from": release, "target_release": here}
        now = definition(megatron_source, symbol)
        try:
            source = release_source(release)
        except ReleaseSourceError as err:
            findings.append(f"{symbol}: upstream's body as of {release} cannot be read: {err}")
            records.append({**record, "problem": str(err)})
            continue
        then = definition(MegatronSource(source.root), symbol)
        record["read_from"] = source.origin
        if then is None or now is None:
            missing = release if then is None else f"{here} (this target)"
            findings.append(f"{symbol}: megatron-core {missing} defines no function {symbol.partition(':')[2]}")
            records.append({**record, "problem": f"no definition in {missing}"})
            continue
        labels = (f"megatron-core {release}: {then.place}", f"megatron-core {here}: {now.place}")
        diff = body_diff(then.text, now.text, *labels)
        record.update({"then": then.place, "now": now.place, "changed": bool(diff)})
        if diff:
            written = folder / f"{symbol.replace(':', '.')}.diff"
            written.parent.mkdir(parents=True, exist_ok=True)
            written.write_text(diff)
            record["diff"] = str(written)
            findings.append(
                f"{symbol}: upstream's body changed between {release} (copied; read from {source.origin}) and "
                f"{here} (this target): {diff_summary(diff)}. Review the copy against it:\n{shown(diff, str(written))}"
            )
        records.append(record)
    write_json(report_dir / "copies.json", {"target": target.session, "copies": records})
    assert not findings, contract_failure(
        target, FAMILY.name, "upstream changed functions the subject's copies were taken from", findings
    )


FROM_SOURCE = pytest.mark.from_source


@pytest.fixture(scope="module")
def from_source(
    request: pytest.FixtureRequest, target: Target, subject_ref: SubjectRef, report_dir: Path, record_finding
) -> SessionSource:
    """The replaced symbols of the declared framework: those the live checks above checked applied, and each other
    one read from the framework's source and Megatron's (:mod:`harness.contracts.api_fingerprint.session_source`),
    with why. Each symbol's line is a finding of the session; all are in ``replaced_symbols.json``."""
    declaration = subject_ref.declaration
    if declaration is None:
        pytest.skip("a module subject's replaced symbols are checked applied: nothing is read from source")
    applied, why, because = _checked_applied(request, bool(declaration.megatron_symbols))
    versions = installed_versions()
    try:
        root = framework_source_root(declaration)
    except ReleaseSourceError as err:
        pytest.fail(f"{target.session}: the framework's source cannot be read: {err}")
    found = session_verdicts(
        root,
        declaration.megatron_symbols,
        {"patch": declaration.patch},
        versions["megatron-core"] or "0",
        versions["torch"] or "0",
        applied,
        why,
        because,
    )
    found.write(report_dir / "replaced_symbols.json", target.session)
    for line in found.lines():
        record_finding(FAMILY.name, line)
    if not found.verdicts:
        left = "every replaced symbol was checked applied" if applied else "no patch of Megatron found in its source"
        pytest.skip(f"nothing to read from source: {left}")
    return found


def _checked_applied(
    request: pytest.FixtureRequest, declared: bool
) -> tuple[dict[str, tuple[str, list[str]]], dict[str, str], str]:
    """The symbols the live checks checked applied, each with its verdict by the same rules the source path uses
    (:func:`~harness.source.source_verdicts.judge`), why each other declared one was not, and why
    the rest are read from source."""
    if not declared:
        return {}, {}, "no [megatron_symbols] declared: nothing is checked applied"
    try:
        subject = request.getfixturevalue("subject")
        checked = request.getfixturevalue("megatron_calls")
        replacements = request.getfixturevalue("replacements")
    except (Exception, pytest.fail.Exception, pytest.skip.Exception) as err:
        return {}, {}, f"the live checks could not run here: {_first_line(err)}"
    source = request.getfixturevalue("megatron_source")
    applied = {
        each.symbol: judge(source, each.symbol, each.function, each.name, each.calls, each.kind, set(replacements))
        for each in checked
    }
    applied.update(dict.fromkeys(getattr(subject, "REPLACED_ON_INSTANCES", ()), ("on the real step", [])))
    why = {s: f"not checked applied: {problem}" for s, (_, _, problem) in replacements.items() if problem}
    return applied, why, "not declared in [megatron_symbols], or not a function the live checks could have"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


@FROM_SOURCE
def test_replaced_symbols_read_from_source_fit_megatrons_calls(target: Target, from_source: SessionSource) -> None:
    """Every replaced symbol not checked applied, judged by the live checks' rules from its definition: a call site
    it cannot bind, an unpacking of another count, a call of the original the target's no longer takes, a by-value
    binding Megatron calls, a replaced name the framework reads that Megatron here does not define."""
    problems = [
        f"{v.symbol} (from source: {v.why}): {finding}" for v in from_source.of("red") for finding in v.findings
    ]
    assert not problems, contract_failure(
        target, FAMILY.name, "replaced symbols read from source do not fit Megatron's own calls", problems
    )


@FROM_SOURCE
@pytest.mark.advisory
def test_replaced_symbols_read_from_source_keep_what_megatron_passes(
    target: Target, from_source: SessionSource
) -> None:
    """Keywords a call site passes that the replacement takes in ``**kwargs`` and never reads, by-value bindings
    Megatron never calls, unpacked counts the source does not decide."""
    notes = [f"{v.symbol} (from source): {finding}" for v in from_source.of("advisory") for finding in v.findings]
    assert not notes, contract_failure(target, FAMILY.name, "replaced symbols read from source drop or hide", notes)


@FROM_SOURCE
@pytest.mark.advisory
def test_replaced_symbols_read_from_source_are_decided(target: Target, from_source: SessionSource) -> None:
    """A replaced symbol with no call site found (a ``backward`` autograd calls, a class bound in a module) or a
    replacement that is no function of the source: checked by nothing, and said so, never a fit."""
    undecided = [f"{v.symbol} (from source): {'; '.join(v.findings)}" for v in from_source.of("undecided")]
    assert not undecided, contract_failure(
        target, FAMILY.name, "what Megatron does with replaced symbols read from source could not be decided", undecided
    )
