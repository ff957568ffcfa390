"""The target stays the target: after a framework's requirements are installed, its venv must still import
megatron-core as the target's venv does, and each dependency that requires torch must import beside the target's
torch. What breaks either is found, left out and named, so that no report blames Megatron for what an install did.

The probe imports the modules in a child of the venv's interpreter and returns, per module that raised, the error and
the files its traceback went through. The distribution owning the innermost of those files, among those the install
added or moved, is the cause (Transformer Engine's core wheel raising "cudnn shared object not found" under
``import megatron.core``): it is uninstalled (added) or put back at the target's version (moved), and the probe runs
again. Where no file points at one, the CUDA-only families the install added are tried without, all at once.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.install.distributions import Distribution, applies, installed, owners, site_packages
from harness.install.uv_runs import index_arguments, uv_pip
from harness.targets.megatron_names import MEGATRON_MODULES

CUDA_FAMILIES = re.compile(
    r"^(transformer-engine.*|nvidia-.*|apex|flash-attn.*|mamba-ssm|causal-conv1d|deep-ep|deep-gemm|grouped-gemm)$"
)
"""Distributions that only work on a CUDA machine: what is tried without first when no traceback names a cause."""
PROBE_TIMEOUT_S = 600.0
_MAX_ROUNDS = 8
_MARK = "megatron-conformance-probe:"

_PROBE = f"""
import importlib, json, sys, traceback
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except BaseException as err:
        chain, seen = [], err
        while seen is not None and len(chain) < 20:
            chain.append(seen)
            seen = seen.__cause__ or seen.__context__
        frames = [[f.filename, f.lineno] for e in chain[::-1] for f in traceback.extract_tb(e.__traceback__)[::-1]]
        line = traceback.format_exception_only(type(err), err)[-1].strip()
        failed.append({{"module": name, "error": line, "frames": frames}})
print({_MARK!r} + json.dumps(failed))
"""


@dataclass(frozen=True)
class ImportFailure:
    """A module whose import raised: the error as Python printed it, and the traceback's files, innermost first (the
    root cause's, where one exception was raised from another)."""

    module: str
    error: str
    frames: tuple[tuple[str, int], ...] = ()

    def where(self, through: str | None = None) -> str:
        """The innermost file and line outside Python's import machinery, from ``site-packages`` on, and where it
        differs, the innermost one of ``through`` (the file of the distribution left out)."""
        files = [_shown(name, line) for name, line in self.frames if name[:1] != "<"]
        if not files:
            return "no traceback"
        if through is not None and through != files[0]:
            return f"{files[0]}, through {through}"
        return files[0]


def probe(python: Path, modules: Iterable[str], timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, ImportFailure]:
    """The modules among ``modules`` that raise at import in the venv of ``python`` (in this order, one process)."""
    names = list(dict.fromkeys(modules))
    if not names:
        return {}
    try:
        done = subprocess.run(
            [str(python), "-c", _PROBE, *names], capture_output=True, text=True, timeout=timeout_s, cwd=python.parent
        )
    except subprocess.TimeoutExpired:
        return {n: ImportFailure(n, f"the import did not end within {timeout_s:.0f} s") for n in names}
    marked = [line for line in done.stdout.splitlines() if line.startswith(_MARK)]
    if not marked:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {n: ImportFailure(n, f"the interpreter ended before reporting: {tail}") for n in names}
    return {
        entry["module"]: ImportFailure(entry["module"], entry["error"], tuple((f, int(n)) for f, n in entry["frames"]))
        for entry in json.loads(marked[-1][len(_MARK) :])
    }


@dataclass
class Mending:
    """What the probe found and did: the report's lines, and the error that still keeps Megatron from importing."""

    lines: list[str] = field(default_factory=list)
    megatron_broken: str | None = None


def coupled_modules(distributions: dict[str, Distribution], changed: set[str], python_version: str) -> dict[str, str]:
    """The top-level modules of each added or moved distribution that requires torch, with their distribution."""
    modules = {}
    for name in sorted(changed):
        distribution = distributions.get(name)
        if distribution is None or name == "torch":
            continue
        if any(r.name == "torch" and applies(r, python_version, {""}) for r in distribution.requires):
            for module in distribution.modules():
                modules[module] = name
    return modules


def mend(
    python: Path,
    target_python: Path,
    target_pins: list[str],
    frameworks: set[str],
    held: dict[str, str],
    python_version: str,
) -> Mending:
    """Probe the venv of ``python`` against the target's (``target_python``, whose packages are ``target_pins``),
    leaving out what breaks Megatron's import or cannot be imported beside the target's torch."""
    mending = Mending()
    before = dict(pin.partition("==")[::2] for pin in target_pins)
    megatron = [] if probe(target_python, MEGATRON_MODULES) else list(MEGATRON_MODULES)
    folder = site_packages(python)
    tried_cuda = False
    unmended: dict[str, ImportFailure] | None = None
    for _ in range(_MAX_ROUNDS):
        distributions = installed(folder)
        changed = {
            name
            for name, d in distributions.items()
            if before.get(name) != d.version and name not in held and name not in frameworks
        }
        coupled = coupled_modules(distributions, changed, python_version)
        failures = probe(python, [*megatron, *coupled])
        if not failures:
            return mending
        owned = owners(folder, distributions)
        causes: dict[str, ImportFailure] = {}
        through: dict[str, str | None] = {}
        for failure in failures.values():
            frames = _owned_frames(failure, owned, changed)
            cause = next(iter(frames), None) or coupled.get(failure.module)
            if cause is not None and cause not in causes:
                causes[cause], through[cause] = failure, frames.get(cause)
        if not causes and not tried_cuda and any(m in failures for m in megatron):
            tried_cuda = True
            failure = next(failures[m] for m in megatron if m in failures)
            causes = {name: failure for name in sorted(changed) if CUDA_FAMILIES.match(name)}
        if not causes:
            unmended = failures  # nothing left to leave out: what the last probe found stands
            break
        for name, failure in causes.items():
            line = _leave_out(python, distributions[name], before.get(name), failure, through.get(name), held)
            mending.lines.append(line)
    still = {m: f for m, f in (probe(python, megatron) if unmended is None else unmended).items() if m in megatron}
    if still:
        failure = next(iter(still.values()))
        mending.megatron_broken = (
            f"megatron-core {held.get('megatron-core', '')} imports in the target's venv but not beside the "
            f"framework's requirements: importing {failure.module} raised {failure.error} ({failure.where()}), "
            "and leaving out what the install added did not mend it"
        )
        mending.lines.append(mending.megatron_broken)
    return mending


def _owned_frames(failure: ImportFailure, owned: dict[Path, str], changed: set[str]) -> dict[str, str]:
    """The distributions of ``changed`` whose files the traceback went through, innermost first, each with its
    innermost file and line."""
    found: dict[str, str] = {}
    for filename, line in failure.frames:
        owner = owned.get(Path(filename).resolve())
        if owner in changed and owner not in found:
            found[owner] = _shown(filename, line)
    return found


def _shown(filename: str, line: int) -> str:
    """A traceback's file and line as the report shows it: from ``site-packages`` on."""
    return f"{filename.partition('site-packages/')[2] or filename}:{line}"


def _leave_out(
    python: Path,
    distribution: Distribution,
    target_version: str | None,
    failure: ImportFailure,
    through: str | None,
    held: dict[str, str],
) -> str:
    """Uninstall ``distribution``, or put it back at the target's version; the report's line."""
    beside = (
        "the target's venv imports it"
        if failure.module in MEGATRON_MODULES
        else f"beside the target's torch {held.get('torch', '')}"
    )
    why = f"importing {failure.module} raised {failure.error} ({failure.where(through)}); {beside}"
    if target_version is None:
        done = uv_pip(python, "uninstall", [distribution.name])
        what = f"left out {distribution.name} {distribution.version}"
    else:
        done = uv_pip(python, "install", ["--no-deps", *index_arguments(), f"{distribution.name}=={target_version}"])
        took = distribution.version
        what = f"put {distribution.name} back at the target's {target_version} (the install took {took})"
    if done.returncode != 0:
        return f"{what} failed ({done.stderr.strip().splitlines()[-1:]}): {why}"
    return f"{what}: {why}"
