"""What keeps a family from checking anything, turned into a red per family: a Megatron that cannot be imported, a
subject that cannot be loaded, a family the declaration requires but cannot run.

Without this, such a session ends in pytest's INTERNALERROR (no case, no repro line, every count 0) or, for a
family whose role is missing, in a green job that checked nothing of it. Here the collected cases of each blocked
family are replaced, once collection is done, by one case (:class:`BlockedFamily`) that fails with the reason: the
red names target, family and symbol like any other, carries the repro line of the family's case file, and reaches
the terminal, ``summary.json`` and the report the way every red does. The replacement happens in
``pytest_collection_modifyitems``, so xdist workers collect the same cases.
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.connection
import os
import re
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.install.framework_install import megatron_broken_by_install
from harness.plugin.families import Family, family_of_case
from harness.subjects.declaration import DeclarationFileError
from harness.subjects.loading import SubjectError, SubjectRef
from harness.targets.installed_versions import installed_versions
from harness.targets.matrix import MEGATRON_DISTRIBUTION
from harness.targets.megatron_names import MEGATRON_MODULES

BLOCKERS = pytest.StashKey[list["Blocker"]]()


CUDA_ONLY_MODULES = (
    "transformer_engine",
    "apex",
    "amp_C",
    "flash_attn",
    "flash_attn_interface",
    "flash_attn_3",
    "deep_ep",
    "deep_gemm",
    "grouped_gemm",
    "mamba_ssm",
    "causal_conv1d",
    "fused_weight_gradient_mlp_cuda",
)
"""Modules only a CUDA machine has: a subject that cannot be loaded for want of one is not wrong, it cannot run
here."""

_MISSING_MODULE = re.compile(r"(?:No module named|needs module|cannot import name \S+ from) '([\w.]+)'")


@dataclass(frozen=True)
class Blocker:
    """Why some families cannot run: one line (``what``) and the families it blocks (``None``: every one)."""

    what: str
    families: tuple[str, ...] | None = None
    subject_free: bool = True
    """Whether it blocks the families that need no subject too (smoke): a Megatron that cannot be imported does."""
    machine_bound: bool = False
    """The subject needs what only a CUDA machine has: its families are skipped saying so, not red."""

    def blocks(self, owner: Family) -> bool:
        if owner.name == "smoke" and not self.subject_free:
            return False
        return self.families is None or owner.name in self.families

    def blocks_case(self, item: pytest.Item) -> bool:
        """A case that reads only source (``from_source``) runs where the subject cannot be loaded."""
        return self.subject_free or item.get_closest_marker("from_source") is None


def cuda_only_module(line: str) -> str | None:
    """The CUDA-only module a load error names (``No module named 'transformer_engine'``, a name Megatron binds only
    with Transformer Engine), else None."""
    for match in _MISSING_MODULE.finditer(line):
        top = match.group(1).split(".")
        if any(part in CUDA_ONLY_MODULES for part in top):
            return match.group(1)
    return None


def _exception_line(error: BaseException) -> str:
    """``Type: message`` of ``error`` on one line; the gate's own errors (a declaration's key, a subject's spec) say
    what they are without their type."""
    if isinstance(error, (DeclarationFileError, SubjectError)):
        return str(error).splitlines()[0]
    return "".join(traceback.format_exception_only(error)).strip().splitlines()[-1]


def megatron_blocker(prefix: Path | None = None) -> Blocker | None:
    """A blocker when Megatron's core or ``finalize_model_grads`` module raises at import (a broken candidate, a
    dependency the wheel forgot), else None. In a framework's requirements venv (``prefix``, default the running
    one) whose install broke an import the target's venv makes, the blocker says so: the install, not Megatron."""
    for module in MEGATRON_MODULES:
        try:
            importlib.import_module(module)
        except Exception as err:
            broken = megatron_broken_by_install(Path(sys.prefix) if prefix is None else prefix)
            if broken is not None:
                return Blocker(f"the framework's requirements break this venv, not Megatron: {broken}")
            version = installed_versions().get(MEGATRON_DISTRIBUTION) or "(version unknown)"
            raised = _exception_line(err)
            return Blocker(f"megatron-core {version} cannot be imported: importing {module} raised {raised}")
    return None


def subject_blocker(error: BaseException | str) -> Blocker:
    """The blocker for a subject whose loading raised ``error`` (a declaration's key is in its message)."""
    what = error if isinstance(error, str) else _exception_line(error)
    missing = cuda_only_module(what)
    if missing is not None:
        return Blocker(
            f"the subject cannot be loaded on this machine: {what} ({missing} is on CUDA machines only); its replaced "
            "Megatron symbols are checked from source",
            subject_free=False,
            machine_bound=True,
        )
    return Blocker(f"the subject cannot be loaded: {what}", subject_free=False)


SUBJECT_LOAD_TIMEOUT_S = 120.0


def subject_load_error(subject: SubjectRef, timeout_s: float = SUBJECT_LOAD_TIMEOUT_S) -> str | None:
    """Why loading a module subject fails, found in a child forked from this process (Megatron already imported
    here, so it costs the subject's own import): the gate's process never imports it itself before a case does, so a
    subject that patches Megatron at import changes nothing the cases read before they pin upstream. None when it
    loads."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_try_load, args=(subject, sender), name="megatron-conformance-subject-load")
    child.start()
    sender.close()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        return f"loading {subject.spec} did not finish within {timeout_s:.0f} s"
    if receiver.poll():
        return receiver.recv()
    return f"loading {subject.spec} ended its process with exit status {child.exitcode}"


def _try_load(subject: SubjectRef, sender: multiprocessing.connection.Connection) -> None:
    try:
        subject.load()
        sender.send(None)
    except BaseException as err:
        sender.send(_exception_line(err))
    finally:
        sender.close()
        os._exit(0)


class BlockedError(Exception):
    """The failure of a :class:`BlockedFamily` case: the blocker's line, nothing of a traceback."""


class BlockedFamily(pytest.Item):
    """The one case a blocked family runs: it fails with why the family could not check anything (its red section
    already in the text: the repro line re-runs the family's case file, not this case)."""

    def __init__(self, *, reason: str, skipped: str | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.reason = reason
        self.skipped = skipped

    def runtest(self) -> None:
        if self.skipped is not None:
            pytest.skip(self.skipped)
        raise BlockedError(self.reason)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: object = None) -> str:
        if isinstance(excinfo.value, BlockedError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return self.nodeid.split("::", 1)[0], None, self.name


def replace_blocked(items: list[pytest.Item], blockers: list[Blocker], wording: Callable[[Family, str], str]) -> None:
    """Replace, in place, the cases of every family a blocker blocks by one :class:`BlockedFamily` case per family.

    ``wording(family, reason)`` is the whole failure text, red section included (the gate words it).
    """
    kept: list[pytest.Item] = []
    done: set[str] = set()
    for item in items:
        owner = family_of_case(item.nodeid)
        blocker = next((b for b in blockers if owner is not None and b.blocks(owner) and b.blocks_case(item)), None)
        if blocker is None or owner is None:
            kept.append(item)
            continue
        if owner.name in done:
            continue
        done.add(owner.name)
        module = item.getparent(pytest.Module)
        name = f"{owner.name.replace('-', '_')}_could_not_run"
        skipped = blocker.what if blocker.machine_bound else None
        kept.append(BlockedFamily.from_parent(module, name=name, reason=wording(owner, blocker.what), skipped=skipped))
    items[:] = kept
