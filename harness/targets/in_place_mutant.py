"""A Megatron mutant in a process that has imported Megatron already: its modules imported again, the mutant's files
read from their edited text, nothing copied.

A forked child of a warm run (:mod:`harness.plugin.warm_sessions`) drops every ``megatron`` module and imports
``megatron.core`` and the finalize module again, with a finder first on ``sys.meta_path`` that compiles each edited
file from the mutant's text. Megatron's own modules take 0.1-0.4 s to import once torch and Megatron's third-party
packages are loaded (they stay), where a fresh interpreter on a copied package takes seconds of CPU and a second
import in the fork server. The fork server of the child is forked after this (:func:`harness.ranks.pool.
fork_fork_server`), so the ranks see the same modules. A module imported later (the GPT model, the optimizer) is
found through the same finder, in the session and in the ranks alike.

The edited text is also what ``inspect`` reads for the mutated module (its lines are put in ``linecache``), so a
contract that reads Megatron's source sees the mutant, as it would in a copied package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import linecache
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import CodeType, ModuleType

from harness.targets.megatron_names import FINALIZE_MODULE

_PACKAGE = "megatron"
_DEPENDENTS = ("harness.ranks.megatron_state",)
"""The harness's modules that keep Megatron's state: imported again after Megatron, never holding the old one."""


class InPlaceMutationError(RuntimeError):
    """The mutant cannot be imported in this process as declared."""


def module_name(relative: str) -> str:
    """``core/distributed/finalize_model_grads.py`` -> ``megatron.core.distributed.finalize_model_grads``."""
    parts = Path(relative).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((_PACKAGE, *parts))


def can_run_in_place(files: Sequence[str]) -> bool:
    """Whether edits of ``files`` (relative to the ``megatron`` package) are all Python modules this finder serves:
    anything else (a data file, a native extension) is read some other way, and needs a copied package."""
    return all(Path(file).suffix == ".py" for file in files)


class _EditedSourceLoader(importlib.machinery.SourceFileLoader):
    """Loads one module from the mutant's text rather than its file (never from or into its bytecode cache)."""

    def __init__(self, fullname: str, path: str, text: str) -> None:
        super().__init__(fullname, path)
        self.text = text

    def get_source(self, fullname: str) -> str:
        return self.text

    def get_code(self, fullname: str) -> CodeType:
        return compile(self.text, self.path, "exec", dont_inherit=True)


class _EditedSourceFinder(importlib.abc.MetaPathFinder):
    """Finds the edited modules where the path finder would, and hands them the mutant's text."""

    def __init__(self, mutant: str, texts: Mapping[str, str]) -> None:
        self.mutant = mutant
        self.texts = dict(texts)

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> object:
        if fullname not in self.texts:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            raise InPlaceMutationError(f"mutant {self.mutant}: {fullname} is not found where Megatron is installed")
        loader = _EditedSourceLoader(fullname, spec.origin, self.texts[fullname])
        lines = self.texts[fullname].splitlines(keepends=True)
        # No modification time: linecache.checkcache keeps the entry instead of reading the file back.
        linecache.cache[spec.origin] = (len(self.texts[fullname]), None, lines, spec.origin)
        return importlib.util.spec_from_file_location(
            fullname, spec.origin, loader=loader, submodule_search_locations=spec.submodule_search_locations
        )


def apply_in_place(mutant: str, sources: Mapping[str, str]) -> None:
    """Import Megatron again in this process with ``sources`` (file relative to the ``megatron`` package -> edited
    text) in place of those files; raises :class:`InPlaceMutationError` unless every edited module already loaded
    before came back from the edited text."""
    if not can_run_in_place(list(sources)):
        raise InPlaceMutationError(f"mutant {mutant}: edits other files than Python modules: {sorted(sources)}")
    texts = {module_name(file): text for file, text in sources.items()}
    loaded = {name for name in texts if name in sys.modules}
    for name in [name for name in sys.modules if name == _PACKAGE or name.startswith(f"{_PACKAGE}.")]:
        del sys.modules[name]
    for name in _DEPENDENTS:
        sys.modules.pop(name, None)
    finder = _EditedSourceFinder(mutant, texts)
    sys.meta_path.insert(0, finder)
    importlib.invalidate_caches()
    for name in ("megatron.core", FINALIZE_MODULE, *sorted(loaded)):
        importlib.import_module(name)
    for name in sorted(loaded):
        if not isinstance(getattr(sys.modules[name], "__loader__", None), _EditedSourceLoader):
            raise InPlaceMutationError(f"mutant {mutant}: {name} was imported again, but not from the edited text")


def read_mutations(path: Path, count: int) -> list[dict[str, object] | None]:
    """The mutations file of a warm run: one entry per subject, ``None`` or ``{"id": ..., "sources": {...}}``."""
    entries = json.loads(path.read_text())
    if not isinstance(entries, list) or len(entries) != count:
        raise InPlaceMutationError(f"{path}: expected a list of {count} mutations, one per subject")
    return entries
