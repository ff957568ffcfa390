"""Mutation testing of the gate itself: each case family must turn red on the breakage it exists for, and stay green
on changes that keep upstream's behaviour.

The mutants are data (``harness/sensitivity/mutants.yaml``, schema in its header). A *megatron* mutant is a set
of exact text edits to a copy of a target's installed ``megatron`` package: a release moving or changing what the
subject leans on. A *subject* mutant is a seeded broken subject. Each run is the real gate: the target's
interpreter, its pytest, the case files of the family that must catch the mutant, verdicts read back from JUnit.

A mutated copy goes first on ``PYTHONPATH``. The smoke case would fail on it by design (Megatron is no longer imported
from the installed distribution), so smoke is never run on a mutant; a pre-flight import in the very environment of
the run proves instead that ``megatron.core`` comes from the copy, so a mutant cannot "survive" by not being loaded.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness import REPO_ROOT
from harness.formats.keys import key_problem

ROOT = REPO_ROOT
CATALOGUE = Path(__file__).resolve().parent / "mutants.yaml"
FAMILIES = {
    "chunks": "cases/test_chunks.py",
    "equivalence": "cases/test_equivalence.py",
    "provider": "cases/test_provider.py",
    "import": "cases/test_import.py",
    "fingerprint": "cases/test_fingerprint.py",
}
KINDS = ("megatron", "subject")
REQUIRED_KEYS = ("id", "kind", "targets", "why")
OPTIONAL_KEYS = ("family", "equivalent", "edits", "subject")
EDIT_KEYS = ("file", "find", "replace")
EDIT_OPTIONAL_KEYS = ("count",)
VERDICTS = ("killed", "survived", "false alarm", "ok", "not applicable", "error")
# A family file takes 10-150 s here; a mutant's run stops at its first red example. Past this limit the run is
# reported as an error.
CASE_TIMEOUT_S = 900
PREFLIGHT = "import megatron.core; print(megatron.core.__file__)"
FIND_INSTALLED = (
    "import importlib.util, pathlib; "
    "print(pathlib.Path(importlib.util.find_spec('megatron.core').origin).resolve().parent.parent)"
)


class CatalogueError(ValueError):
    """The mutant catalogue cannot be used; the message names the file, the mutant and the key."""


class MutationError(RuntimeError):
    """A mutant cannot be made or loaded as declared: an edit matching another number of times, or a copy not loaded."""


@dataclass(frozen=True)
class Edit:
    """Replace ``find`` by ``replace`` in ``file`` (relative to the ``megatron`` package root); ``find`` must occur
    exactly ``count`` times, so a release that moved the text fails loudly instead of yielding an unmutated copy."""

    file: str
    find: str
    replace: str
    count: int = 1


@dataclass(frozen=True)
class Mutant:
    """One catalogue entry."""

    id: str
    kind: str
    targets: tuple[str, ...]
    why: str
    family: str | None = None
    equivalent: bool = False
    edits: tuple[Edit, ...] = ()
    subject: str | None = None

    def selection(self) -> list[str]:
        """The case files of the first run: the family that must catch it, or every family but smoke."""
        return list(FAMILIES.values()) if self.equivalent else [FAMILIES[str(self.family)]]


def _fail(where: str, message: str) -> CatalogueError:
    return CatalogueError(f"{where}: {message}")


def _text(where: str, entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise _fail(where, f"'{key}' must be a non-empty string, got {value!r}")
    return value


def _edit(where: str, raw: object) -> Edit:
    if not isinstance(raw, dict):
        raise _fail(where, f"an edit must be a mapping, got {raw!r}")
    problem = key_problem(raw, EDIT_KEYS, EDIT_OPTIONAL_KEYS)
    if problem:
        raise _fail(where, f"edit key '{problem[0]}': {problem[1]}")
    file = _text(where, raw, "file")
    if Path(file).is_absolute() or ".." in Path(file).parts:
        raise _fail(where, f"edit file {file!r} must be relative to the megatron package root")
    if not isinstance(raw["replace"], str):
        raise _fail(where, f"'replace' must be a string, got {raw['replace']!r}")
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise _fail(where, f"edit 'count' must be a positive integer, got {count!r}")
    return Edit(file, _text(where, raw, "find"), raw["replace"], count)


def _mutant(where: str, entry: dict[str, Any], known: tuple[str, ...]) -> Mutant:
    problem = key_problem(entry, REQUIRED_KEYS, OPTIONAL_KEYS)
    if problem:
        raise _fail(where, f"key '{problem[0]}': {problem[1]}")
    kind = entry["kind"]
    if kind not in KINDS:
        raise _fail(where, f"kind {kind!r} is not one of {', '.join(KINDS)}")
    targets = entry["targets"]
    if not isinstance(targets, list) or not targets:
        raise _fail(where, f"'targets' must be a non-empty list of target sessions, got {targets!r}")
    strange = [t for t in targets if t not in known]
    if strange:
        raise _fail(where, f"target {strange[0]!r} is not in the matrix (known: {', '.join(known)})")
    equivalent = entry.get("equivalent", False)
    if not isinstance(equivalent, bool):
        raise _fail(where, f"'equivalent' must be true or false, got {equivalent!r}")
    family = entry.get("family")
    if equivalent and family is not None:
        raise _fail(where, "an equivalent mutant must stay green everywhere; it names no 'family'")
    if not equivalent and family not in FAMILIES:
        raise _fail(where, f"'family' must be one of {', '.join(FAMILIES)}, got {family!r}")
    edits: tuple[Edit, ...] = ()
    subject = None
    if kind == "megatron":
        if "subject" in entry:
            raise _fail(where, "a megatron mutant takes 'edits', not 'subject'")
        if not isinstance(entry.get("edits"), list) or not entry["edits"]:
            raise _fail(where, "a megatron mutant needs a non-empty list of 'edits'")
        edits = tuple(_edit(where, raw) for raw in entry["edits"])
    else:
        if "edits" in entry:
            raise _fail(where, "a subject mutant takes 'subject', not 'edits'")
        subject = _text(where, entry, "subject")
        if not (ROOT / subject).exists():
            raise _fail(where, f"subject {subject} does not exist under {ROOT}")
    why = _text(where, entry, "why")
    return Mutant(_text(where, entry, "id"), kind, tuple(targets), why, family, equivalent, edits, subject)


def parse_catalogue(document: object, known_targets: Iterable[str], source: str = "catalogue") -> list[Mutant]:
    """Validate a loaded catalogue document: every error names the mutant and the key."""
    if not isinstance(document, dict) or set(document) != {"mutants"} or not isinstance(document["mutants"], list):
        raise CatalogueError(f"{source}: the document must be a mapping with one key, 'mutants', holding a list")
    known = tuple(known_targets)
    mutants: list[Mutant] = []
    for index, entry in enumerate(document["mutants"]):
        if not isinstance(entry, dict):
            raise CatalogueError(f"{source}: entry {index} must be a mapping, got {entry!r}")
        ident = entry.get("id")
        where = f"{source}: mutant {ident!r}" if isinstance(ident, str) and ident else f"{source}: entry {index}"
        mutant = _mutant(where, entry, known)
        if any(m.id == mutant.id for m in mutants):
            raise CatalogueError(f"{where}: duplicate id")
        mutants.append(mutant)
    return mutants


def load_catalogue(path: Path, known_targets: Iterable[str]) -> list[Mutant]:
    """Read and validate the catalogue at ``path``."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise CatalogueError(f"{path}: {err}") from None
    return parse_catalogue(document, known_targets, str(path))


def select(mutants: list[Mutant], ids: Iterable[str] | None) -> list[Mutant]:
    """The mutants named by ``ids`` (all when ``None``), in catalogue order; an unknown id is an error."""
    if ids is None:
        return mutants
    wanted = set(ids)
    unknown = sorted(wanted - {m.id for m in mutants})
    if unknown:
        raise CatalogueError(f"no mutant named {', '.join(map(repr, unknown))} in the catalogue")
    return [m for m in mutants if m.id in wanted]


# --- making a mutated Megatron -----------------------------------------------------------------------------------


def mutated_sources(mutant: Mutant, package: Path) -> dict[str, str]:
    """The new text of every file ``mutant`` edits in the ``megatron`` package at ``package``; nothing is written.

    Edits of one file apply in order. An edit whose ``find`` text occurs any other number of times than declared
    raises :class:`MutationError` naming the mutant, the file and the count.
    """
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        if edit.file not in texts:
            path = package / edit.file
            if not path.is_file():
                raise MutationError(f"mutant {mutant.id}: {edit.file} does not exist in {package}")
            texts[edit.file] = path.read_text()
        found = texts[edit.file].count(edit.find)
        if found != edit.count:
            raise MutationError(
                f"mutant {mutant.id}: the find text occurs {found} times in {edit.file} ({package}), "
                f"expected exactly {edit.count}: {edit.find[:120]!r}"
            )
        texts[edit.file] = texts[edit.file].replace(edit.find, edit.replace)
    return texts


def build_mutant_package(mutant: Mutant, package: Path, workdir: Path) -> Path:
    """Copy the ``megatron`` package at ``package`` under ``workdir``, apply ``mutant`` and return the directory to
    put on ``PYTHONPATH``.

    Bytecode is copied with the sources (their timestamps preserved, so it stays valid): compiling all of Megatron in
    every process of a run costs about 40 s where loading the bytecode costs 6 s. An edited file's bytecode is
    deleted, so its new source is compiled.
    """
    sources = mutated_sources(mutant, package)
    site = workdir / "site"
    shutil.copytree(package, site / "megatron")
    for relative, text in sources.items():
        path = site / "megatron" / relative
        path.write_text(text)
        for stale in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
            stale.unlink()
    return site


def _printed_path(python: Path, code: str, site: Path | None, timeout: float) -> tuple[Path | None, str]:
    """Run ``code`` in the venv of ``python`` (the mutated copy, if any, on the path) and read the path it printed
    last; ``None`` and the end of stderr when it failed."""
    completed = subprocess.run(
        [str(python), "-c", code], env=_environment(site), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if completed.returncode != 0:
        return None, completed.stderr
    return Path(completed.stdout.strip().splitlines()[-1]), ""


def installed_package(python: Path) -> Path:
    """The ``megatron`` package directory installed in the venv of ``python`` (found, not imported)."""
    package, error = _printed_path(python, FIND_INSTALLED, None, timeout=120)
    if package is None:
        raise MutationError(f"{python}: cannot find megatron.core: {error.strip()[-2000:]}")
    return package


def _environment(site: Path | None) -> dict[str, str]:
    """The run's environment: ours, with ``PYTHONPATH`` naming only the mutated copy (or nothing)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def verify_loaded(mutant: Mutant, python: Path, site: Path) -> None:
    """Import ``megatron.core`` exactly as the run will and fail unless it comes from the mutated copy."""
    imported, error = _printed_path(python, PREFLIGHT, site, timeout=300)
    if imported is None:
        raise MutationError(f"mutant {mutant.id}: importing megatron.core failed:\n{error[-3000:]}")
    if not imported.resolve().is_relative_to(site.resolve()):
        raise MutationError(
            f"mutant {mutant.id}: megatron.core is imported from {imported.resolve()}, not from the copy {site}"
        )


# --- running the gate on a mutant --------------------------------------------------------------------------------


@dataclass
class CaseRun:
    """One pytest run: its exit code, the failing case ids with their family, and the end of its output."""

    returncode: int
    failed: dict[str, str]
    output: str

    def broken(self) -> bool:
        """The run itself went wrong (usage, internal error, nothing collected) rather than some case failing."""
        return self.returncode not in (0, 1) and not self.failed


def family_of(case: str) -> str:
    """The family whose case file ``case`` (``cases/test_x.py::name``) belongs to; ``?`` for none."""
    module = case.split("::", 1)[0]
    return next((family for family, path in FAMILIES.items() if path == module), "?")


def failing_cases(junit: Path) -> dict[str, str]:
    """Failed or errored cases in a JUnit file, as ``cases/test_x.py::name`` mapped to their family."""
    if not junit.exists():
        return {}
    failed = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if any(child.tag in ("failure", "error") for child in case):
            classname = case.get("classname", "")
            name = case.get("name", "")
            # A collection error has no class: its name is the module.
            module, test = (classname, name) if classname else (name, "")
            case_id = module.replace(".", "/") + ".py" + (f"::{test}" if test else "")
            failed[case_id] = family_of(case_id)
    return failed


def case_command(
    python: Path,
    target: str,
    selection: list[str],
    report_dir: Path,
    junit: Path,
    profile: str = "ci",
    options: list[str] | None = None,
) -> list[str]:
    """The pytest command that runs ``selection`` of ``cases/`` on ``target`` in the venv of ``python``, as the
    harness drives it (no cache, reports and JUnit under ``report_dir``), with ``options`` before the selection."""
    return [
        str(python),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        f"--target={target}",
        f"--report-dir={report_dir}",
        f"--junitxml={junit}",
        f"--hypothesis-profile={profile}",
        *(options or []),
        *selection,
    ]


def run_cases(
    python: Path,
    target: str,
    selection: list[str],
    subject: str,
    site: Path | None,
    report_dir: Path,
    first_failure: bool = False,
) -> CaseRun:
    """Run ``selection`` in the target venv of ``python``, with the mutated copy (if any) first on the path.

    With ``first_failure`` the run stops at the first red case and hypothesis does not shrink: enough to know that a
    mutant is caught. Without it (equivalent mutants) every case runs its full ``ci`` profile, as the gate does.
    """
    junit = report_dir / "junit.xml"
    profile = "fail-fast" if first_failure else "ci"
    options = ["-x", f"--subject={subject}"] if first_failure else [f"--subject={subject}"]
    command = case_command(python, target, selection, report_dir, junit, profile, options)
    completed = subprocess.run(
        command, cwd=ROOT, env=_environment(site), capture_output=True, text=True, timeout=CASE_TIMEOUT_S
    )
    return CaseRun(completed.returncode, failing_cases(junit), (completed.stdout + completed.stderr)[-4000:])


@dataclass
class Outcome:
    """One row of the report: a mutant on a target."""

    mutant: str
    kind: str
    target: str
    family: str | None
    equivalent: bool
    verdict: str
    caught_by: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    why: str = ""


def _outcome(mutant: Mutant, target: str, verdict: str, **details: Any) -> Outcome:
    return Outcome(mutant.id, mutant.kind, target, mutant.family, mutant.equivalent, verdict, why=mutant.why, **details)


def judge(mutant: Mutant, run: CaseRun) -> tuple[str, str]:
    """Verdict and note for ``mutant`` from its (last) run.

    Killed: a case of the mutant's own family failed; if only other families caught it (the second run, every family
    but smoke) it is still killed, with a note, since the gate went red but the declared contract did not say why.
    An equivalent mutant is a false alarm as soon as any case fails. A run that broke judges nothing: error.
    """
    if run.broken():
        return "error", f"pytest exit {run.returncode}: {run.output}"
    if mutant.equivalent:
        return ("false alarm" if run.failed else "ok"), ""
    if not run.failed:
        return "survived", ""
    families = sorted(set(run.failed.values()))
    if mutant.family in families:
        return "killed", ""
    return "killed", f"caught only by {', '.join(families)}, not by its own family"


def evaluate(mutant: Mutant, target: str, python: Path, package: Path, subject: str, workdir: Path) -> Outcome:
    """Run the gate on one mutant: its family's cases, then every other family if those stayed green."""
    if target not in mutant.targets:
        return _outcome(mutant, target, "not applicable")
    started = time.monotonic()
    site = None
    if mutant.kind == "megatron":
        site = build_mutant_package(mutant, package, workdir)
        verify_loaded(mutant, python, site)
    chosen = str(ROOT / mutant.subject) if mutant.subject else subject
    must_fail = not mutant.equivalent
    run = run_cases(python, target, mutant.selection(), chosen, site, workdir, first_failure=must_fail)
    if not run.broken() and must_fail and not run.failed:
        others = [path for family, path in FAMILIES.items() if family != mutant.family]
        run = run_cases(python, target, others, chosen, site, workdir, first_failure=True)
    verdict, note = judge(mutant, run)
    seconds = round(time.monotonic() - started, 1)
    return _outcome(mutant, target, verdict, caught_by=sorted(run.failed), note=note, seconds=seconds)


# --- the whole catalogue ------------------------------------------------------------------------------------------


@dataclass
class Report:
    """Every outcome of a sensitivity run, with its rates."""

    targets: list[str]
    subject: str
    outcomes: list[Outcome]
    wall_time_s: float

    def count(self, verdict: str) -> int:
        return sum(1 for o in self.outcomes if o.verdict == verdict)

    def kill_rate(self) -> float | None:
        """Killed over all applicable mutants that must be caught (a survivor or a broken run counts against)."""
        judged = [o for o in self.outcomes if not o.equivalent and o.verdict != "not applicable"]
        return sum(o.verdict == "killed" for o in judged) / len(judged) if judged else None

    def false_alarm_rate(self) -> float | None:
        """False alarms over all applicable equivalent mutants."""
        judged = [o for o in self.outcomes if o.equivalent and o.verdict != "not applicable"]
        return sum(o.verdict == "false alarm" for o in judged) / len(judged) if judged else None

    def failures(self) -> list[Outcome]:
        """What makes the run red: survivors, false alarms and broken runs."""
        return [o for o in self.outcomes if o.verdict in ("survived", "false alarm", "error")]


def check_catalogue(mutants: list[Mutant], packages: dict[str, Path]) -> None:
    """Make every applicable megatron mutant's edits in memory, so a stale edit fails before anything runs."""
    for target, package in packages.items():
        for mutant in mutants:
            if mutant.kind == "megatron" and target in mutant.targets:
                mutated_sources(mutant, package)


def run_sensitivity(
    mutants: list[Mutant],
    pythons: dict[str, Path],
    subject: str,
    workers: int,
    progress: Callable[[str], object] = print,
) -> Report:
    """Every mutant on every target in ``pythons`` (session name to interpreter), ``workers`` runs at a time."""
    started = time.monotonic()
    packages = {target: installed_package(python) for target, python in pythons.items()}
    check_catalogue(mutants, packages)
    jobs = [(m, t) for t in pythons for m in mutants]
    # Equivalent mutants run every family and take longest: start them first so the pool ends evenly.
    jobs.sort(key=lambda job: (not job[0].equivalent, job[0].kind != "megatron"))
    finished = itertools.count(1)

    def job(mutant: Mutant, target: str) -> Outcome:
        with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as workdir:
            try:
                outcome = evaluate(mutant, target, pythons[target], packages[target], subject, Path(workdir))
            except (MutationError, subprocess.TimeoutExpired) as err:
                outcome = _outcome(mutant, target, "error", note=str(err))
        done = next(finished)
        if outcome.verdict != "not applicable":
            cases = f" ({len(outcome.caught_by)} failing cases)" if outcome.caught_by else ""
            progress(f"[{done}/{len(jobs)}] {outcome.verdict}: {mutant.id} on {target}{cases} {outcome.seconds} s")
        return outcome

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(job, mutant, target) for mutant, target in jobs]
        outcomes = [future.result() for future in futures]
    order = {m.id: i for i, m in enumerate(mutants)}
    outcomes.sort(key=lambda o: (order[o.mutant], o.target))
    return Report(list(pythons), subject, outcomes, round(time.monotonic() - started, 1))


# --- the report --------------------------------------------------------------------------------------------------


def _rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.0%}"


def summary_line(report: Report) -> str:
    """Kill rate, false-alarm rate, counts and wall time in one line."""
    counts = ", ".join(f"{report.count(v)} {v}" for v in VERDICTS if report.count(v))
    return (
        f"kill rate {_rate(report.kill_rate())}, false-alarm rate {_rate(report.false_alarm_rate())} "
        f"({counts}) on {', '.join(report.targets)} in {report.wall_time_s:.0f} s"
    )


def render_markdown(report: Report) -> str:
    """The report as a Markdown table, the failures first."""
    lines = [
        "# Sensitivity of the gate",
        "",
        f"Subject `{report.subject}`. {summary_line(report)}.",
        "",
    ]
    failures = report.failures()
    if failures:
        lines += ["## Failures", ""]
        lines += [f"- {o.verdict}: `{o.mutant}` on {o.target}: {o.note or o.why}" for o in failures]
        lines.append("")
    lines += [
        "| mutant | kind | target | expected family | caught by | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for o in report.outcomes:
        expected = "none (equivalent)" if o.equivalent else str(o.family)
        caught = "<br>".join(f"`{case}`" for case in o.caught_by)
        note = o.note.replace("\n", " ").replace("|", "\\|")[:300]
        lines.append(f"| `{o.mutant}` | {o.kind} | {o.target} | {expected} | {caught} | {o.verdict} | {note} |")
    return "\n".join(lines) + "\n"


def write_report(report: Report, directory: Path) -> tuple[Path, Path]:
    """``sensitivity.md`` and ``sensitivity.json`` under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    markdown, data = directory / "sensitivity.md", directory / "sensitivity.json"
    markdown.write_text(render_markdown(report))
    document = {
        "targets": report.targets,
        "subject": report.subject,
        "wall_time_s": report.wall_time_s,
        "kill_rate": report.kill_rate(),
        "false_alarm_rate": report.false_alarm_rate(),
        "counts": {v: report.count(v) for v in VERDICTS},
        "outcomes": [asdict(o) for o in report.outcomes],
    }
    data.write_text(json.dumps(document, indent=2) + "\n")
    return markdown, data


def parse_arguments(argv: list[str], default_targets: Iterable[str]) -> argparse.Namespace:
    """The sensitivity session's options: ``--targets``, ``--mutants`` (ids; default all), ``--workers``."""
    parser = argparse.ArgumentParser(prog="nox -s sensitivity --", description="Run the mutant catalogue.")
    parser.add_argument("--targets", nargs="+", default=list(default_targets), metavar="SESSION")
    parser.add_argument("--mutants", nargs="+", default=None, metavar="ID")
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args(argv)
