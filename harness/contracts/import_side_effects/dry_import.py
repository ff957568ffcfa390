"""Which Megatron modules loading the subject imports, found by a dry run in a throwaway process, so that every
observation of the import family starts with them imported, whatever the cases before it imported.

Megatron's own first import of a module reads environment variables, issues warnings and binds attributes on its
parent packages. Charged to an adapter that merely imports that module, those effects made a verdict depend on the
order of the cases: 21 effects for an adapter importing ``megatron.core.models.gpt.gpt_model`` when no earlier case
had imported it, none when one had. The dry run loads the subject and its adapter package the way the cases do, in
a rank forked from the preloaded fork server (so nothing it does reaches the gate's process), and answers the
``megatron`` modules present at its end; the observing process imports them before it observes. What the adapter
itself does at import is still seen: it runs again, under observation.
"""

from __future__ import annotations

import sys
from types import ModuleType

from harness.contracts.import_side_effects.isolation import (
    Isolation,
    isolated_modules,
    load_isolated,
    observe_isolations,
)
from harness.ranks.pool import RankPool
from harness.subjects.loading import SubjectRef

MEGATRON = "megatron"


def load_subject_afresh(subject: SubjectRef) -> None:
    """Load the subject as a new process would: a module subject under a fresh name; a declared subject with its
    framework's modules imported again, so their import-time effects are seen whatever ran before."""
    declaration = subject.declaration
    if declaration is None:
        load_isolated(subject.name)
        return
    tops = {name.split(".")[0] for name in (declaration.adapter_package, declaration.patch.get("module", ""))}
    tops |= {
        declaration.splitter.get("function", "").split(".")[0],
        declaration.provider.get("factory", "").split(".")[0],
    }
    with isolated_modules():
        for name in [name for name in sys.modules if name.split(".")[0] in tops - {""}]:
            del sys.modules[name]
        subject.load()


def _megatron(names: object) -> set[str]:
    return {name for name in names if name == MEGATRON or name.startswith(f"{MEGATRON}.")}


def dry_import_task(rank: int, world_size: int, subject: SubjectRef) -> list[str]:
    """Rank-side: load the subject afresh and its adapter package, as the cases do; the Megatron modules imported
    by the end (the isolated loads' own included, which their restore removed again)."""
    seen: set[str] = set()

    def finished(isolation: Isolation) -> None:
        seen.update(_megatron(isolation.imported))

    with observe_isolations(lambda isolation: None, finished):
        load_subject_afresh(subject)
        loaded: ModuleType = subject.load()
        adapter = getattr(loaded, "ADAPTER_PACKAGE", None)
        if adapter is not None:
            load_isolated(adapter)
    return sorted(seen | _megatron(sys.modules))


def megatron_modules_loaded_by(subject: SubjectRef) -> list[str]:
    """The Megatron modules a fresh process has imported once it has loaded ``subject`` and its adapter package; a
    subject whose loading raises answers what was imported up to that point."""
    pool = RankPool(1)
    try:
        return pool.run(_dry_import_or_partial, subject)[0]
    finally:
        pool.close()


def _dry_import_or_partial(rank: int, world_size: int, subject: SubjectRef) -> list[str]:
    try:
        return dry_import_task(rank, world_size, subject)
    except Exception:
        # The load's own failure is the business of the cases that observe it; what it imported still counts.
        return sorted(_megatron(sys.modules))
