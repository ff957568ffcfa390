"""``[symbols_patch]``: the framework's own apply (and undo) of the Megatron symbols it replaces, as two calls.

An apply is one function or several, applied one by one, as frameworks spread their patches over functions (one per
Megatron area) that a public entry point calls in turn. One that raises (a patch that needs Transformer Engine, say)
does not stop the rest: what it bound before the raise stays applied and is checked live, each raise is kept, one
line, in :attr:`SymbolsPatch.raised`, and what it never bound is read from source.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

from harness.subjects.declaration import Declaration
from harness.subjects.framework_imports import import_declared, megatron_restored, missing_dependency
from harness.subjects.import_chain import import_failure


class SymbolsPatch:
    """``[symbols_patch]`` applied and undone as declared; ``raised`` holds, one line each, what the functions of
    the last apply raised (empty when all ran)."""

    def __init__(self, declaration: Declaration) -> None:
        self.declaration = declaration
        self.table = declaration.symbols_patch
        self.applied = self.table.get("applied", "call")
        self.arguments = dict(self.table.get("arguments", {}))
        self.model_argument = self.table.get("model_argument")
        self.raised: list[str] = []
        self._entered: list[Any] = []
        if self.applied == "import":
            self._found_module()
            return
        with megatron_restored(declaration):
            module = import_declared(declaration, "symbols_patch.module", self.table["module"])
        self.functions = {
            key: self._function(module, key, name)
            for key in ("context", "undo")
            if (name := self.table.get(key)) is not None
        }
        self.applies = [(name, self._function(module, "apply", name)) for name in self.table.get("apply", ())]

    @property
    def has_undo(self) -> bool:
        return "undo" in self.table or self.applied == "context"

    def _function(self, module: Any, key: str, name: str) -> Callable[..., object]:
        """``name`` in the patch module, or ``module:function`` elsewhere, which must be callable."""
        where, colon, function_name = name.rpartition(":")
        if colon:
            with megatron_restored(self.declaration):
                module = import_declared(self.declaration, f"symbols_patch.{key}", where)
        function = getattr(module, function_name, None)
        if not callable(function):
            owner = where if colon else self.table["module"]
            raise self.declaration.fail(f"symbols_patch.{key}", f"{owner!r} has no function {function_name!r}")
        return function

    def _found_module(self) -> None:
        name = self.table["module"]
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError as err:
            if err.name and not (name == err.name or name.startswith(f"{err.name}.")):
                raise self.declaration.fail("symbols_patch.module", missing_dependency(name, err.name)) from None
            found = None
        except Exception as err:  # a package above the module raised while imported: the module may well exist
            raise self.declaration.fail("symbols_patch.module", import_failure(name, err)) from None
        if found is None:
            where = self.declaration.distribution or f"source root {self.declaration.source_root}"
            raise self.declaration.fail("symbols_patch.module", f"no module {name!r} ({where})")

    def _call(self, function: Callable[..., object], model: object, extra: dict[str, Any]) -> object:
        name = self.model_argument
        takes = name is not None and name in inspect.signature(function).parameters
        return function(**extra, **({name: model} if takes else {}))

    def apply(self, model: object = None) -> object:
        """Apply as declared. Of several apply functions each runs whatever the others raise; with one, what it
        raises is the caller's, as before."""
        self.raised = []
        if self.applied == "import":
            name = self.table["module"]
            for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
                del sys.modules[loaded]
            return import_declared(self.declaration, "symbols_patch.module", name)
        if self.applied == "context":
            handle = self._call(self.functions["context"], model, self.arguments)
            handle.__enter__()
            self._entered.append(handle)
            return handle
        if len(self.applies) == 1:
            return self._call(self.applies[0][1], model, self.arguments)
        for name, function in self.applies:
            try:
                self._call(function, model, self.arguments)
            except Exception as err:
                first = (str(err).strip().splitlines() or [""])[0]
                self.raised.append(f"{name} raised {type(err).__name__}: {first}")
        return None

    def undo(self, model: object = None) -> object:
        if self.applied == "context":
            return self._entered.pop().__exit__(None, None, None) if self._entered else None
        if self.applied == "import":
            name = self.table["module"]
            function = getattr(sys.modules.get(name), str(self.table.get("undo")), None)
            if not callable(function):
                raise self.declaration.fail("symbols_patch.undo", f"{name!r} has no function {self.table['undo']!r}")
            return function()
        return self._call(self.functions["undo"], model, {})
