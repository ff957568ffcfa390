"""Which Megatron object a name of the framework means where it is used, read from the scopes that use sees.

The source scan's discovery (:func:`~harness.source.source_scan.scan_sources`, for a starter
declaration) binds names across all files by name alone: one file's ``from megatron.core.enums import ModelType``
made every ``ModelType`` of mcore-bridge Megatron's, its own enum of model names included, and a parameter called
``tokenizer`` anywhere a path into ``megatron.core.utils``. Here a name is looked up as Python looks it up: in the
function the use is in, the functions around it, then its module (a class body only for the statements directly in
it). Where one of them binds the name, that scope's bindings decide: an import from ``megatron``, an assignment of
a Megatron object, a loop over a list or tuple of them, or an import of a name that a module of the framework
itself binds to one make it Megatron's; a def, a class, another loop variable, an import from another library or of
the framework's own name make it no Megatron object there. What the source does not give, a parameter or an
object's attribute (``def _resolve(fmg)``, ``fmg = self.fmg``), is what the same file binds that name to where it
says; a call of one of the framework's functions is what that function returns, read in its own scopes.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.source.megatron_namespace import is_megatron
from harness.source.syntax import absolute_module

Where = tuple[Path, tuple[ast.AST, ...]]
"""A file and the scopes around a place in it, outermost (the module) first."""

PathsAt = Callable[[ast.expr, Where], frozenset[str]]
"""What an expression denotes in Megatron, evaluated at a place."""

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_OPAQUE = (ast.Attribute, ast.Subscript, ast.Call, ast.Await, ast.IfExp, ast.BoolOp)
"""Values whose object the source does not give: an attribute of an object, an item, a call's result."""


@dataclass(frozen=True)
class _Imported:
    """``import a.b as name`` (``dotted`` is ``a.b``), or ``import a.b`` binding ``a``."""

    dotted: str


@dataclass(frozen=True)
class _From:
    """``from origin import name``, relative imports resolved."""

    origin: str
    name: str


@dataclass(frozen=True)
class _Value:
    """``name = value`` (or ``name := value``)."""

    value: ast.expr
    at: tuple[ast.AST, ...] | None = None
    """The scopes the value is read in, where not the binding scope's: a function assigning a ``global``."""


@dataclass(frozen=True)
class _Each:
    """A loop variable over a list or tuple written in the source, or a name its scopes bind to one
    (``for module in (transformer_block, mamba_block)``): each element in turn."""

    iterable: ast.expr


@dataclass(frozen=True)
class _Parameter:
    """A function's parameter: what its callers pass, which the source does not say."""


@dataclass(frozen=True)
class _Def:
    """A function the scope defines: never a Megatron object itself, but what it returns may be one."""

    node: ast.FunctionDef | ast.AsyncFunctionDef


_PARAMETER = _Parameter()
_OWN = None
"""A binding that is never a Megatron object: a class, a loop or ``with`` variable, an unpacked target."""


_Binding = _Imported | _From | _Value | _Each | _Parameter | _Def | None


class ScopedNames:
    """The framework's files, with what each scope of each binds, read once per scope."""

    def __init__(self, trees: Mapping[Path, ast.Module], modules: Mapping[Path, str]) -> None:
        self.trees = trees
        self.modules = modules
        self.files = {name: path for path, name in modules.items()}
        self._bindings: dict[int, dict[str, list[_Binding]]] = {}
        self._open: set[tuple[int, str]] = set()
        self._by_file: dict[Path, dict[str, list[tuple[Where, _Binding]]]] = {}
        self._reading_elsewhere = False
        self._known: dict[tuple[int, str, bool], frozenset[str]] = {}
        self._known_returns: dict[tuple[int, bool], frozenset[str]] = {}
        self._returning: set[int] = set()
        self._cut = 0
        """How many reads were cut short by a cycle: a result read while one was is not kept."""

    def lookup(self, where: Where, name: str, paths_at: PathsAt) -> frozenset[str] | None:
        """The Megatron paths ``name`` denotes at ``where``; ``None`` where no scope the place sees binds it."""
        path, chain = where
        for index in range(len(chain) - 1, -1, -1):
            scope = chain[index]
            if index < len(chain) - 1 and isinstance(scope, ast.ClassDef):
                continue  # a class body's names are not seen from the functions inside it
            bound = self.bindings(scope, path).get(name)
            if bound is None:
                continue
            key = (id(scope), name, self._reading_elsewhere)
            if key in self._known:
                return self._known[key]
            if key[:2] in self._open:
                self._cut += 1
                return frozenset()  # ``x = x.y`` read while resolving ``x``: no Megatron object of its own
            self._open.add(key[:2])
            cut = self._cut
            try:
                inner = (path, chain[: index + 1])
                found = frozenset(p for binding in bound for p in self._paths(binding, inner, paths_at, name))
            finally:
                self._open.discard(key[:2])
            if cut == self._cut:
                self._known[key] = found  # not cut short by a name read while it was read: the same everywhere
            return found
        return None

    def returned(self, definition: ast.AST, read: Callable[[], frozenset[str]]) -> frozenset[str]:
        """What a framework function returns, ``read()`` once (a recursive function returns nothing more)."""
        key = (id(definition), self._reading_elsewhere)
        if key in self._known_returns:
            return self._known_returns[key]
        if id(definition) in self._returning:
            self._cut += 1
            return frozenset()
        self._returning.add(id(definition))
        cut = self._cut
        try:
            found = read()
        finally:
            self._returning.discard(id(definition))
        if cut == self._cut:
            self._known_returns[key] = found
        return found

    def function(self, where: Where, func: ast.expr) -> Where | None:
        """Where the framework's function a call at ``where`` calls is defined (the place inside it, for reading
        its returns): a def the scopes see or a module of the framework exports, a method of the enclosing class
        (``self.f``), a function of a framework module imported (``helpers.f``); ``None`` for anything else."""
        path, chain = where
        if isinstance(func, ast.Name):
            return self._defined(where, func.id)
        if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
            return None
        if func.value.id in ("self", "cls"):
            for index in range(len(chain) - 1, 0, -1):
                if isinstance(chain[index], ast.ClassDef):
                    method = next(
                        (b.node for b in self.bindings(chain[index], path).get(func.attr, []) if isinstance(b, _Def)),
                        None,
                    )
                    return (path, (*chain[: index + 1], method)) if method is not None else None
            return None
        module = self._module_named(where, func.value.id)
        return self._defined((self.files[module], (self.trees[self.files[module]],)), func.attr) if module else None

    def _defined(self, where: Where, name: str, seen: frozenset[tuple[Path, str]] = frozenset()) -> Where | None:
        """The def ``name`` means at ``where``: one of the scopes it sees, or the one a framework module it is
        imported from defines (re-exports followed, a cycle of them not)."""
        path, chain = where
        for index in range(len(chain) - 1, -1, -1):
            if index < len(chain) - 1 and isinstance(chain[index], ast.ClassDef):
                continue
            bound = self.bindings(chain[index], path).get(name)
            if bound is None:
                continue
            for binding in bound:
                if isinstance(binding, _Def):
                    return path, (*chain[: index + 1], binding.node)
                if isinstance(binding, _From) and binding.origin in self.files and (path, name) not in seen:
                    origin = self.files[binding.origin]
                    return self._defined((origin, (self.trees[origin],)), binding.name, seen | {(path, name)})
            return None
        return None

    def _module_named(self, where: Where, name: str) -> str | None:
        """The framework module ``name`` is bound to at ``where`` by an import, if it is one."""
        path, chain = where
        for index in range(len(chain) - 1, -1, -1):
            for binding in self.bindings(chain[index], path).get(name, []):
                if isinstance(binding, _Imported) and binding.dotted in self.files:
                    return binding.dotted
                if isinstance(binding, _From) and f"{binding.origin}.{binding.name}" in self.files:
                    return f"{binding.origin}.{binding.name}"
        return None

    def _paths(
        self, binding: _Binding, where: Where, paths_at: PathsAt, name: str, fallback: bool = True
    ) -> frozenset[str]:
        """What one binding makes ``name`` at ``where``. A parameter, or a value the source cannot follow (an
        object's attribute, a call's result), is what the same file binds that name to where it says, unless
        ``fallback`` is off (while reading those)."""
        if isinstance(binding, _Imported):
            return frozenset([binding.dotted]) if is_megatron(binding.dotted) else frozenset()
        if isinstance(binding, _From):
            if is_megatron(binding.origin):
                return frozenset([f"{binding.origin}.{binding.name}"])
            origin = self.files.get(binding.origin)
            if origin is None:
                return frozenset()  # another library's name, or a module of the framework itself
            found = self.lookup((origin, (self.trees[origin],)), binding.name, paths_at)
            return found or frozenset()
        if isinstance(binding, _Each):
            return frozenset(p for element in self._elements(binding.iterable, where) for p in paths_at(element, where))
        fallback = fallback and not self._reading_elsewhere
        if isinstance(binding, _Value):
            found = paths_at(binding.value, (where[0], binding.at) if binding.at else where)
            if found or not fallback or not isinstance(binding.value, _OPAQUE):
                return found
        elif not isinstance(binding, _Parameter) or not fallback:
            return frozenset()
        # Frameworks pass the Megatron module they imported to their helpers (``def _resolve(fmg, ...)``) and keep
        # it on their objects (``fmg = self.fmg``): what the file binds the name to where it says, read without
        # following other parameters and objects in turn.
        self._reading_elsewhere = True
        try:
            return frozenset(
                found
                for other_where, other in self._in_file(where[0], name)
                for found in self._paths(other, other_where, paths_at, name, fallback=False)
            )
        finally:
            self._reading_elsewhere = False

    def _elements(self, iterable: ast.expr, where: Where) -> list[ast.expr]:
        """The elements of a list or tuple written in the source, or of the one the nearest scope binding the name
        ``iterable`` binds it to (every binding there a list or tuple); none for anything else."""
        if isinstance(iterable, ast.List | ast.Tuple | ast.Set):
            return list(iterable.elts)
        if not isinstance(iterable, ast.Name):
            return []
        path, chain = where
        for scope in reversed(chain):
            bound = self.bindings(scope, path).get(iterable.id)
            if bound is None:
                continue
            literal = all(isinstance(b, _Value) and isinstance(b.value, ast.List | ast.Tuple) for b in bound)
            return [e for b in bound for e in b.value.elts] if literal else []
        return []

    def _in_file(self, path: Path, name: str) -> list[tuple[Where, _Binding]]:
        """Every binding of ``name`` in the file other than a parameter, with the place it is bound at."""
        if path not in self._by_file:
            found: dict[str, list[tuple[Where, _Binding]]] = {}
            stack: list[tuple[ast.AST, ...]] = [(self.trees[path],)]
            while stack:
                chain = stack.pop()
                for bound, bindings in self.bindings(chain[-1], path).items():
                    found.setdefault(bound, []).extend(
                        ((path, chain), b) for b in bindings if not isinstance(b, _Parameter)
                    )
                stack += [(*chain, node) for node in _own_nodes(_body(chain[-1])) if isinstance(node, _SCOPES)]
            self._by_file[path] = found
        return self._by_file[path].get(name, [])

    def bindings(self, scope: ast.AST, path: Path) -> dict[str, list[_Binding]]:
        """Name -> what ``scope`` (of the file ``path``) itself binds it to, not its nested functions and classes."""
        if id(scope) in self._bindings:
            return self._bindings[id(scope)]
        found: dict[str, list[_Binding]] = {}
        module, is_package = self.modules.get(path, ""), path.name == "__init__.py"
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = scope.args
            for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                found.setdefault(argument.arg, []).append(_PARAMETER)
            for argument in (arguments.vararg, arguments.kwarg):
                if argument is not None:
                    found.setdefault(argument.arg, []).append(_OWN)
        declared_outside: set[str] = set()
        for node in _own_nodes(_body(scope)):
            for name, binding in _bound_by(node, module, is_package):
                found.setdefault(name, []).append(binding)
            if isinstance(node, ast.Global | ast.Nonlocal):
                declared_outside.update(node.names)
        for name in declared_outside:
            found.pop(name, None)
        if isinstance(scope, ast.Module):
            for chain, node in _global_assignments(scope):
                for name, binding in _bound_by(node, module, is_package):
                    if isinstance(binding, _Value):
                        binding = _Value(binding.value, chain)
                    found.setdefault(name, []).append(binding)
        self._bindings[id(scope)] = found
        return found


def _global_assignments(tree: ast.Module) -> Iterator[tuple[tuple[ast.AST, ...], ast.AST]]:
    """The nodes of functions that bind a name they declare ``global`` (``global _fmg; _fmg = ...``), each with
    the scopes around it: bindings of the module, made at run time."""
    stack: list[tuple[ast.AST, ...]] = [(tree,)]
    while stack:
        chain = stack.pop()
        nodes = list(_own_nodes(_body(chain[-1])))
        declared = {name for node in nodes if isinstance(node, ast.Global) for name in node.names}
        if len(chain) > 1 and declared:
            for node in nodes:
                if any(name in declared for name, _ in _bound_by(node, "", False)):
                    yield chain, node
        stack += [(*chain, node) for node in nodes if isinstance(node, _SCOPES)]


def _body(scope: ast.AST) -> list[ast.stmt] | list[ast.expr]:
    return [scope.body] if isinstance(scope, ast.Lambda) else scope.body


def _own_nodes(body: list[ast.stmt] | list[ast.expr]) -> Iterator[ast.AST]:
    """The nodes of a scope's body, not those inside the functions, classes and lambdas it defines (their names
    are its own)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _bound_by(node: ast.AST, module: str, is_package: bool) -> list[tuple[str, _Binding]]:
    """The names one node binds in its scope, each with what it binds."""
    if isinstance(node, ast.Import):
        return [
            (alias.asname, _Imported(alias.name))
            if alias.asname
            else (alias.name.split(".")[0], _Imported(alias.name.split(".")[0]))
            for alias in node.names
        ]
    if isinstance(node, ast.ImportFrom):
        origin = absolute_module(node, module, is_package)
        return [(alias.asname or alias.name, _From(origin, alias.name)) for alias in node.names if alias.name != "*"]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [(node.name, _Def(node))]
    if isinstance(node, ast.ClassDef):
        return [(node.name, _OWN)]
    if isinstance(node, ast.Assign):
        return [bound for target in node.targets for bound in _targets(target, node.value)]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return _targets(node.target, node.value)
    if isinstance(node, ast.NamedExpr):
        return [(node.target.id, _Value(node.value))]
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and isinstance(node.target, ast.Name):
        return [(node.target.id, _Each(node.iter))]
    if isinstance(node, ast.AugAssign | ast.For | ast.AsyncFor | ast.comprehension):
        return _targets(node.target, None)
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return _targets(node.optional_vars, None)
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [(node.name, _OWN)]
    return []


def _targets(target: ast.AST, value: ast.expr | None) -> list[tuple[str, _Value | None]]:
    """``name = value`` binds the value; unpacked targets, loop and ``with`` variables bind nothing known."""
    if isinstance(target, ast.Name):
        return [(target.id, _Value(value) if value is not None else _OWN)]
    if isinstance(target, ast.Tuple | ast.List):
        return [bound for element in target.elts for bound in _targets(element, None)]
    if isinstance(target, ast.Starred):
        return _targets(target.value, None)
    return []
