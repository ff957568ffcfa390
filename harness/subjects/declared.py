"""The subject protocol built from a :class:`~harness.subjects.declaration.Declaration`, by driving the framework's own
code the way its declaration says, never by re-implementing it.

A patch that applies itself at import is imported once (in every process that loads the subject: the parent and each
rank), what it bound into ``finalize_model_grads`` is captured, and Megatron is put back exactly before any case runs;
``install()`` then binds the captured replacement and ``uninstall()`` puts back what was there. A patch applied by a
function is applied and undone through the declared functions (the harness puts back what it saved where no undo is
declared), and a context-manager patch is entered and left. The budget is set the declared way, in the framework's
unit: the module global it lives in (also when the framework reads it from the environment at import), an argument of
the apply function, or an attribute of one (an ``argparse.Namespace`` the harness builds).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.machinery
import importlib.util
import inspect
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.formats.budget_units import CAPTURE_BUDGET_BYTES, UNITS, effective_bytes, in_unit
from harness.subjects.declaration import UNDO_RETURNED, Declaration
from harness.subjects.framework_imports import MISSING, import_declared, megatron_restored, resolve_declared
from harness.subjects.symbols_patch import SymbolsPatch
from harness.targets.megatron_names import FINALIZE_MODULE, UPSTREAM_NAME

_counter = itertools.count()


def build_declared_subject(declaration: Declaration) -> ModuleType:
    """A module exposing the subject protocol for the framework ``declaration`` describes.

    Names a role needs are resolved now, so a wrong dotted name is one :class:`DeclarationFileError` naming its key.
    """
    if not declaration.installed and str(declaration.source_root) not in sys.path:
        # An installed framework is imported from the venv: a second copy from its checkout would shadow it.
        sys.path.insert(0, str(declaration.source_root))
    _check_adapter_package(declaration)
    subject = ModuleType(f"_megatron_conformance_declared_{next(_counter)}_{declaration.path.stem.replace('-', '_')}")
    subject.__doc__ = f"The subject declared by {declaration.path}."
    subject.DECLARATION = declaration
    subject.ADAPTER_PACKAGE = declaration.adapter_package
    subject.IMPORT_SIDE_EFFECTS_ALLOWED = {kind: list(patterns) for kind, patterns in declaration.allow.items()}
    subject.IMPORT_WATCH_MODULES = _patched_libraries(declaration)
    if declaration.megatron_symbols:
        subject.MEGATRON_SYMBOLS = dict(declaration.megatron_symbols)
    if declaration.upstream_body_hashes:
        subject.UPSTREAM_BODY_HASHES = dict(declaration.upstream_body_hashes)
    if declaration.copied_from:
        subject.COPIED_FROM = dict(declaration.copied_from)
    if "env" in declaration.budget:
        # The one variable the adapter may read at import: its reads are listed as waivers, never reported.
        subject.BUDGET_ENV_VAR = declaration.budget["env"]
    # What the provider wrapper promises beyond Megatron's own calls; undeclared, those cases are advisories.
    subject.PROVIDER_INNER_TAKES_KWARGS = declaration.provider_flag("inner_takes_kwargs")
    subject.PROVIDER_NESTED = declaration.provider_flag("nested")
    if declaration.patch:
        DeclaredPatch(declaration, subject)
    if declaration.symbols_patch:
        patch = SymbolsPatch(declaration)
        subject.apply_replacements = patch.apply
        subject.undo_replacements = patch.undo if patch.has_undo else None
        subject.SYMBOLS_PATCH = patch
        subject.REPLACED_ON_INSTANCES = list(declaration.symbols_patch.get("instances", ()))
    # Any import of the framework may patch Megatron (an old bootstrap imports its patch module); none may outlast it.
    with megatron_restored(declaration):
        if declaration.splitter:
            subject.split_into_chunks = _splitter(declaration)
        if declaration.provider:
            factory = declaration.provider["factory"]
            subject.wrap_model_provider = resolve_declared(declaration, "provider.factory", factory)
    return subject


def _patched_libraries(declaration: Declaration) -> list[str]:
    """The libraries the adapter may patch on purpose (``deep_ep`` for ``function-state = ["deep_ep.Buffer.*"]``):
    watched like Megatron, so that what it does to them shows as the waiver it is, and nothing else slips by."""
    kinds = ("module-attribute", "function-state", "class-attribute", "mutable-global")
    roots = {pattern.split(".")[0] for kind in kinds for pattern in declaration.allow.get(kind, ())}
    return sorted(root for root in roots if root.isidentifier())


def _check_adapter_package(declaration: Declaration) -> None:
    """The adapter package exists where it is imported from: under the source root, or, for a framework installed
    into the venv, on ``sys.path`` (found without importing anything)."""
    top = declaration.adapter_package.partition(".")[0]
    relative = Path(*declaration.adapter_package.split("."))
    root = declaration.source_root
    if declaration.installed:
        found = importlib.machinery.PathFinder.find_spec(top)
        locations = list(found.submodule_search_locations or []) if found else []
        if locations:
            root = Path(locations[0]).parent
        else:
            where = declaration.distribution or "the framework installed from [subject] requirements"
            raise declaration.fail(
                "subject.adapter_package", f"no package or module {declaration.adapter_package!r} in {where}"
            )
    if not ((root / relative / "__init__.py").is_file() or (root / relative).with_suffix(".py").is_file()):
        raise declaration.fail(
            "subject.adapter_package", f"no package or module {declaration.adapter_package!r} under {root}"
        )


def _splitter(declaration: Declaration) -> Callable[[list, list, int], Any]:
    """``split_into_chunks(params, grads, budget_bytes)`` calling the framework's splitter in its own argument order
    (params may be absent: many splitters see only tensors), its chunks turned into ``(params, grads)`` pairs from
    what it returns (``splitter.returns``: pairs, lists of grads, or lists of indices into the grads)."""
    function = resolve_declared(declaration, "splitter.function", declaration.splitter["function"])
    order = tuple(declaration.splitter["arguments"])
    returns = declaration.splitter["returns"]

    def split_into_chunks(params: list, grads: list, budget_bytes: int) -> Any:
        given = {"params": params, "grads": grads, "budget": budget_bytes}
        chunks = function(*(given[name] for name in order))
        if returns == "indices":
            return [([params[i] for i in chunk], [grads[i] for i in chunk]) for chunk in chunks]
        if returns == "grads":
            positions: dict[int, list[int]] = {}
            for index, grad in enumerate(grads):
                positions.setdefault(id(grad), []).append(index)
            return [_paired(params, positions, chunk) for chunk in chunks]
        return chunks

    split_into_chunks.__qualname__ = f"split_into_chunks[{declaration.splitter['function']}]"
    return split_into_chunks


def _paired(params: list, positions: dict[int, list[int]], chunk: list) -> tuple[list, list]:
    """A chunk of grads with the param of each, found by identity in order across the whole call (a grad listed twice
    pairs with its params in turn); a tensor that is none of the grads (a copy) pairs with ``None``, which the case
    then names."""
    chunk_params = []
    for grad in chunk:
        waiting = positions.get(id(grad))
        chunk_params.append(params[waiting.pop(0)] if waiting else None)
    return chunk_params, list(chunk)


class DeclaredPatch:
    """The framework's patch of ``finalize_model_grads``, driven as declared, with upstream always restorable."""

    def __init__(self, declaration: Declaration, subject: ModuleType) -> None:
        """Capture the patch and give ``subject`` its ``install``, ``uninstall`` and replacement."""
        self.declaration = declaration
        self.subject = subject
        self.patch = declaration.patch
        self.budget = declaration.budget
        self.unit = str(self.budget.get("unit", "B"))
        self.whole_units = bool(self.budget.get("whole_units", False))
        self.finalize = importlib.import_module(FINALIZE_MODULE)
        self.originals: dict[str, object] = {}
        self.undo_handle: object = None
        self.context: Any = None
        self.installed = False
        self.module, self.rebinds = self._capture()
        self.default_global = self._global(self.module)
        replacement = self.rebinds[UPSTREAM_NAME]
        function = self.patch.get("function")
        if function is not None and getattr(self.module, function, None) is not replacement:
            raise declaration.fail(
                "patch.function",
                f"the patch bound {_describe(replacement)} as {UPSTREAM_NAME}, not {self.patch['module']}.{function}",
            )
        subject.install, subject.uninstall = self.install, self.uninstall
        subject.default_budget = self.default_budget
        subject.allreduce_non_tensor_model_parallel_grads = replacement
        if "unit" in self.budget:
            subject.BUDGET_UNIT = self.unit
            subject.effective_budget = self.effective_budget
        for key in ("apply", "undo"):
            name = self.patch.get(key, UNDO_RETURNED)
            if name != UNDO_RETURNED and not callable(getattr(self.module, name, None)):
                raise declaration.fail(f"patch.{key}", f"{self.patch['module']!r} has no function {name!r}")
        if "global" in self.budget and self.default_global is MISSING:
            raise declaration.fail("budget.global", f"{self.patch['module']!r} has no global {self.budget['global']!r}")

    def _capture(self) -> tuple[ModuleType, dict[str, object]]:
        """Import the patch module, apply it as declared, and put Megatron back exactly; the names it bound and to
        what. An apply that requires its budget is given the 1 GiB default here: what it binds is the same."""
        before = dict(vars(self.finalize))
        applied = self.patch["applied"]
        with megatron_restored(self.declaration):
            module = import_declared(self.declaration, "patch.module", self.patch["module"], fresh=True)
            if applied != "import":
                self._apply(module, self._capture_budget(module))
            rebinds = {
                name: value for name, value in vars(self.finalize).items() if before.get(name, MISSING) is not value
            }
            if applied == "context" or "undo" in self.patch:
                self._undo(module)
        if UPSTREAM_NAME not in rebinds:
            how = {"import": "importing it", "call": f"calling {self.patch.get('apply')}()"}.get(
                applied, f"entering {self.patch.get('context')}()"
            )
            raise self.declaration.fail(
                "patch.applied", f"{how} bound nothing as {FINALIZE_MODULE}.{UPSTREAM_NAME} (applied = {applied!r})"
            )
        self.originals = {name: before.get(name, MISSING) for name in rebinds}
        return module, rebinds

    def _capture_budget(self, module: ModuleType) -> int | None:
        """The budget the capture passes: none (the framework's own default) unless apply requires it."""
        argument = str(self.budget.get("argument", ""))
        if not argument or "." in argument:
            return None
        function = getattr(module, self.patch.get("apply") or self.patch.get("context", ""), None)
        return CAPTURE_BUDGET_BYTES if callable(function) and argument in _missing_arguments(function, {}) else None

    def _arguments(self, budget_bytes: int | None) -> dict[str, Any]:
        """The keywords of apply (or of the context manager): ``[patch] arguments`` as declared, and the budget in
        the framework's unit, as a keyword or as the attribute of an ``argparse.Namespace`` built for it."""
        kwargs = copy.deepcopy(dict(self.patch.get("arguments", {})))
        keyword, _, attribute = str(self.budget.get("argument", "")).partition(".")
        if attribute:
            fields = kwargs.get(keyword, {})
            if budget_bytes is not None:
                fields = {**fields, attribute: in_unit(budget_bytes, self.unit, self.whole_units)}
            kwargs[keyword] = argparse.Namespace(**fields)
        elif keyword and budget_bytes is not None:
            kwargs[keyword] = in_unit(budget_bytes, self.unit, self.whole_units)
        return kwargs

    def _apply(self, module: ModuleType, budget_bytes: int | None) -> None:
        """Apply the patch: call ``apply`` (keeping what it returns, for ``undo = "returned"``), or enter the
        context manager; whatever it raises becomes one line against its key, and an argument it needs that the
        declaration does not supply names the key that would."""
        role = "context" if self.patch["applied"] == "context" else "apply"
        key, name = f"patch.{role}", self.patch[role]
        function = getattr(module, name, None)
        if not callable(function):
            raise self.declaration.fail(key, f"{self.patch['module']!r} has no function {name!r}")
        kwargs = self._arguments(budget_bytes)
        missing = _missing_arguments(function, kwargs)
        if missing:
            hint = f'if {missing[0]!r} is the byte budget, declare budget.argument = "{missing[0]}"'
            if "argument" not in self.budget:
                raise self.declaration.fail(key, f"{name}() needs {', '.join(missing)}, which nothing supplies: {hint}")
            raise self.declaration.fail(
                key, f"{name}() needs {', '.join(missing)}, which nothing supplies: declare it in patch.arguments"
            )
        try:
            handle = function(**kwargs)
            if role == "context":
                handle.__enter__()
                self.context = handle
            else:
                self.undo_handle = handle
        except Exception as err:
            step = f"{name}(...).__enter__()" if role == "context" else f"{name}()"
            raise self.declaration.fail(key, f"{step} raised {type(err).__name__}: {err}") from err

    def _undo(self, module: ModuleType) -> None:
        """Undo the patch: leave the context manager, call ``undo`` (or what apply returned); one line on error."""
        if self.patch["applied"] == "context":
            context, self.context = self.context, None
            if context is None:
                return
            try:
                context.__exit__(None, None, None)
            except Exception as err:
                raise self.declaration.fail(
                    "patch.context", f"{self.patch['context']}(...).__exit__() raised {type(err).__name__}: {err}"
                ) from err
            return
        undo = str(self.patch["undo"])
        if undo.split(".")[0] == UNDO_RETURNED:
            method = undo.partition(".")[2] or "undo"
            handle = self.undo_handle
            function = handle if callable(handle) and "." not in undo else getattr(handle, method, None)
            name = f"{self.patch['apply']}()'s {'result' if function is handle else method}"
        else:
            function, name = getattr(module, undo, None), f"{undo}()"
        if not callable(function):
            raise self.declaration.fail("patch.undo", f"{name} is not callable: {function!r}")
        try:
            function()
        except Exception as err:
            raise self.declaration.fail("patch.undo", f"{name} raised {type(err).__name__}: {err}") from err

    def effective_budget(self, budget_bytes: int) -> int:
        """The bytes the framework really runs with when given ``budget_bytes`` (more, where whole units round up)."""
        return effective_bytes(budget_bytes, self.unit, self.whole_units)

    def default_budget(self) -> tuple[int | None, str]:
        """The framework's own budget in bytes and where it is: the budget global's value after import, else the
        default of the budget argument of ``apply``; ``None`` where neither names a number."""
        factor = UNITS[self.unit]
        value = self.default_global
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value * factor), f"the value of {self.budget['global']} after import"
        argument = str(self.budget.get("argument", ""))
        apply = getattr(self.module, self.patch.get("apply") or self.patch.get("context", ""), None)
        if argument and "." not in argument and callable(apply):
            parameter = inspect.signature(apply).parameters.get(argument)
            default = parameter.default if parameter is not None else None
            if isinstance(default, int | float) and not isinstance(default, bool):
                return int(default * factor), f"the default of {apply.__name__}({argument})"
        return None, ""

    def _global(self, module: ModuleType) -> object:
        name = self.budget.get("global")
        return getattr(module, name, MISSING) if name else MISSING

    def install(self, budget_bytes: int | None = None) -> None:
        """Apply the framework's patch with ``budget_bytes`` (``None``: the framework's own default). Installed
        already, the patch is undone first, the framework's way: applying twice is no call Megatron makes, and a
        framework may refuse it (a registry that will not apply a patch twice, a context entered once)."""
        if self.installed:
            self.uninstall()
        self.installed = True
        if self.patch["applied"] != "import":
            self._apply(self.module, budget_bytes)
        else:
            for name, value in self.rebinds.items():
                setattr(self.finalize, name, value)
        if "global" in self.budget:
            value = self.default_global if budget_bytes is None else in_unit(budget_bytes, self.unit, self.whole_units)
            setattr(self.module, self.budget["global"], value)
        # What finalize_model_grads will call is what this install bound (an apply function may bind a new closure
        # over the budget each time); where it bound nothing, the captured replacement stays, never upstream.
        bound = getattr(self.finalize, UPSTREAM_NAME, None)
        if bound is not None and bound is not self.originals.get(UPSTREAM_NAME):
            self.subject.allreduce_non_tensor_model_parallel_grads = bound

    def uninstall(self) -> None:
        """Undo the patch the declared way, else put back what the harness saw before the patch module ran."""
        self.installed = False
        if self.patch["applied"] == "context" or "undo" in self.patch:
            self._undo(self.module)
        else:
            for name, value in self.originals.items():
                if value is MISSING:
                    if hasattr(self.finalize, name):
                        delattr(self.finalize, name)
                else:
                    setattr(self.finalize, name, value)
        if "global" in self.budget:
            setattr(self.module, self.budget["global"], self.default_global)
        self.subject.allreduce_non_tensor_model_parallel_grads = self.rebinds[UPSTREAM_NAME]


def _missing_arguments(function: Callable[..., Any], given: dict[str, Any]) -> list[str]:
    """The parameters ``function`` requires that ``given`` does not supply (none where its signature is unknown)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return []
    required = (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )
    return [
        p.name
        for p in parameters
        if p.kind in required and p.default is inspect.Parameter.empty and p.name not in given
    ]


def _describe(value: object) -> str:
    return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
