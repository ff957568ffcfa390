"""What the subject's source reaches in Megatron, and the uses its declaration does not cover.

Every ``megatron`` import, module named to ``importlib.import_module`` (also through a string constant or a helper
returning the module), attribute or ``getattr`` on such a module must be covered by a declared symbol (see
:func:`scan_sources` for what is followed). Calls of Megatron functions are recorded by shape, for the check that
one of the subject's call shapes binds to upstream's signature.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import itertools
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from harness.source.megatron_namespace import is_megatron
from harness.source.parsing import parsed_file, walked
from harness.source.reader_error import reading
from harness.source.scoped_names import ScopedNames, Where
from harness.source.scopes import gets_module
from harness.source.symbol_table import Declared, declared_symbols, dotted

_MEGATRON_ROOT = "megatron"
_ATTRIBUTE_BUILTINS = ("hasattr", "setattr", "delattr")


@dataclasses.dataclass(frozen=True)
class Use:
    """A place in the subject's source that reaches Megatron; ``paths`` has several candidates when a name is bound
    to more than one Megatron object."""

    paths: tuple[str, ...]
    file: str
    line: int


@dataclasses.dataclass(frozen=True)
class CallSite:
    """A call of a Megatron function in the subject's source, by shape: positional count and keyword names."""

    path: str
    positional: int
    keywords: tuple[str, ...]
    file: str
    line: int
    source: Path | None = None
    """The file the call is in: where the framework's own checks around it are read."""

    def describe(self) -> str:
        """The shape and place, e.g. ``(2 positional) at allreduce.py:108``."""
        keywords = f", keywords {', '.join(self.keywords)}" if self.keywords else ""
        return f"({self.positional} positional{keywords}) at {self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class Assignment:
    """A Megatron attribute the source binds (``A.b = f``, ``setattr(A, "b", f)``): a patch. ``value`` is the bound
    expression as written, ``scope`` the qualified name of the function that makes it (empty at module level)."""

    paths: tuple[str, ...]
    value: str
    scope: str
    file: Path
    line: int
    registered: bool = False
    """A record of a registry of dotted strings, which a generic loop applies later."""


@dataclasses.dataclass(frozen=True)
class SourceScan:
    """What the subject's files reach in Megatron: every use, the calls by shape, the paths called in any shape, and
    the attributes bound."""

    uses: tuple[Use, ...]
    calls: tuple[CallSite, ...]
    called: frozenset[str] = frozenset()
    assignments: tuple[Assignment, ...] = ()


def subject_files(subject: ModuleType) -> list[Path]:
    """The subject's source files and those of its ``ADAPTER_PACKAGE``, where that names code on disk."""
    locations = list(getattr(subject, "__path__", [])) or [getattr(subject, "__file__", None)]
    adapter = getattr(subject, "ADAPTER_PACKAGE", None)
    if isinstance(adapter, str) and Path(adapter).exists():
        locations.append(adapter)
    elif isinstance(adapter, str):
        spec = importlib.util.find_spec(adapter)
        if spec is not None:
            locations += spec.submodule_search_locations or [spec.origin]
    roots = [Path(location) for location in locations if location]
    files: dict[Path, None] = {}
    for root in roots:
        candidates = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        files.update((f.resolve(), None) for f in candidates if f.suffix == ".py" and "__pycache__" not in f.parts)
    return list(files)


def scan_sources(
    files: Iterable[Path], discovery: bool = False, modules: Mapping[Path, str] | None = None
) -> SourceScan:
    """Every use of Megatron in ``files``, and every call of a Megatron function with its shape.

    Followed: ``import``/``from ... import`` of ``megatron``; ``importlib.import_module``, ``__import__``,
    ``sys.modules[...]`` and ``sys.modules.get(...)`` with a string literal or a module-level string constant; names
    bound to such modules (also through helper functions that return them, and across files); attribute chains on
    them, read or assigned;
    ``getattr``, ``hasattr``, ``setattr`` and ``delattr`` with a literal name or a module-level string constant.
    Binding is by name and flow-insensitive: a name counts as a Megatron alias only when every binding of it in the
    files binds Megatron, and a function parameter of that name is taken to be the same object. Not followed:
    attribute names computed at run time (``getattr(module, name)`` over a loop variable).

    ``discovery`` (for writing a declaration, where finding too much is cheap and missing a patch is not) reads a
    name where it is used, in the scopes that use sees (:mod:`.scoped_names`), not by name across the files: the
    framework's own ``ModelType`` enum is not Megatron's because another file imports Megatron's, and a helper's
    parameter is what its file binds that name to; a call of the framework's function is what that function
    returns, read in its own scopes; ``modules`` (file -> dotted module name) follows the framework's imports of its
    own modules' names. It also follows ``setattr``/``getattr`` names taken from a loop over a module-level tuple of
    strings (``for name in PATCHED: setattr(module, name, f)``).
    """
    trees = {path: parsed_file(path) for path in files}
    resolver = _Resolver(_string_constants(trees.values()))
    if discovery:
        resolver.loop_strings = _loop_strings(trees.values())
        resolver.patching_loops = {
            (path, name): found for path, tree in trees.items() for name, found in _patching_loops(tree).items()
        }
        resolver.scoped = ScopedNames(trees, modules or {})
        resolver.patching_helpers = _patching_helpers(trees.values())
    for _ in range(0 if discovery else 10):
        aliases, returns = _bindings(trees.values(), resolver)
        if (aliases, returns) == (resolver.aliases, resolver.returns):
            break
        resolver.aliases, resolver.returns = aliases, returns
    uses: list[Use] = []
    calls: list[CallSite] = []
    called: set[str] = set()
    assignments: list[Assignment] = []
    for path, tree in trees.items():
        collector = _Collector(resolver, path, discovery)
        resolver.file = path
        with reading(path):
            collector.visit(tree)
        uses += collector.uses
        calls += collector.calls
        called |= collector.called
        assignments += collector.assignments
    return SourceScan(tuple(uses), tuple(calls), frozenset(called), tuple(assignments))


def undeclared_uses(scan: SourceScan, declaration: Iterable[Declared]) -> list[Use]:
    """Uses not covered by a declared symbol: the symbol itself, or a module or class holding a declared one."""
    declared = [dotted(member) for member in declared_symbols(declaration)]

    def covered(path: str) -> bool:
        return any(d == path or d.startswith(path + ".") for d in declared)

    return [use for use in scan.uses if not any(covered(path) for path in use.paths)]


def _string_constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    """``NAME = "..."`` of all files, in any scope (``name = "forward"; setattr(cls, name, f)`` in an applier); a
    name given different values, or any value not a string literal, is left out."""
    values: dict[str, set[str | None]] = {}
    for tree in trees:
        for node in walked(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = node.value.value if isinstance(node.value, ast.Constant) else None
                values.setdefault(node.targets[0].id, set()).add(value if isinstance(value, str) else None)
    return {name: value for name, found in values.items() if len(found) == 1 and (value := next(iter(found)))}


def _loop_strings(trees: Iterable[ast.Module]) -> dict[str, frozenset[str]]:
    """Loop variables over a module-level tuple or list of string literals: each name, the strings it takes."""
    tuples: dict[str, frozenset[str]] = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                strings = _literal_strings(node.value)
                if strings is not None:
                    tuples[node.targets[0].id] = strings
    loops: dict[str, set[str]] = {}
    for tree in trees:
        for node in walked(tree):
            if isinstance(node, ast.For | ast.comprehension) and isinstance(node.target, ast.Name):
                if isinstance(node.iter, ast.Name) and node.iter.id in tuples:
                    loops.setdefault(node.target.id, set()).update(tuples[node.iter.id])
    return {name: frozenset(values) for name, values in loops.items()}


def _patching_loops(tree: ast.Module) -> dict[str, frozenset[str]]:
    """Loop variables of one file's loops over literals, written in the loop itself or bound once at the file's top
    level, that set attributes by them (``for name in ("a", "b")``, ``for name, f in {"a": f}.items()``,
    ``for name, f in (("a", f),)``, ``for name, default in FIELDS.items()``): each name, the strings it takes, read
    in that file only."""
    written = _written_literals(tree)
    loops: dict[str, set[str]] = {}
    for node in walked(tree):
        if not isinstance(node, ast.For):
            continue
        target = node.target.elts[0] if isinstance(node.target, ast.Tuple) and node.target.elts else node.target
        if isinstance(target, ast.Name) and _sets_by(node, target.id):
            strings = _literal_strings(_as_written(node.iter, written), pairs=target is not node.target)
            if strings:
                loops.setdefault(target.id, set()).update(strings)
    return {name: frozenset(values) for name, values in loops.items()}


def _written_literals(tree: ast.Module) -> dict[str, ast.expr]:
    """Names the file's top level binds once, to a literal tuple, list or dict: what a loop over the name runs over."""
    bound: dict[str, list[ast.expr | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in (t for t in targets if isinstance(t, ast.Name)):
                bound.setdefault(target.id, []).append(node.value if len(targets) == 1 else None)
    literal = ast.Tuple | ast.List | ast.Dict
    return {name: values[0] for name, values in bound.items() if len(values) == 1 and isinstance(values[0], literal)}


def _as_written(value: ast.expr, written: dict[str, ast.expr]) -> ast.expr:
    """A loop's iterable with a top-level name replaced by the literal it is bound to (also in ``NAME.items()``)."""
    if isinstance(value, ast.Name) and value.id in written:
        return written[value.id]
    call = value if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) else None
    if call is not None and isinstance(call.func.value, ast.Name) and call.func.value.id in written:
        return ast.Call(ast.Attribute(written[call.func.value.id], call.func.attr, ast.Load()), call.args, [])
    return value


def _patching_helpers(trees: Iterable[ast.Module]) -> dict[str, tuple[int, int]]:
    """Functions of the framework that set an attribute named by one parameter on the object another parameter
    holds (``def patch_method_source(cls, method_name, ...): ... setattr(cls, method_name, new)``): each name, with
    the positions of the object and of the name among its positional parameters. Methods are left out (a call
    through an instance shifts the positions), and so is a name defined twice with other positions."""
    found: dict[str, set[tuple[int, int]]] = {}
    for tree in trees:
        stack: list[tuple[ast.AST, tuple[ast.FunctionDef | ast.AsyncFunctionDef, ...]]] = [(tree, ())]
        while stack:
            node, functions = stack.pop()
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and len(node.args) >= 3:
                owner, name = (getattr(a, "id", None) for a in node.args[:2])
                for function in functions:
                    parameters = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
                    if owner in parameters and name in parameters:
                        found.setdefault(function.name, set()).add((parameters.index(owner), parameters.index(name)))
            for child in ast.iter_child_nodes(node):
                inner = functions
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = functions if isinstance(node, ast.ClassDef) else (*functions, child)
                stack.append((child, inner))
    return {name: next(iter(places)) for name, places in found.items() if len(places) == 1}


def _sets_by(loop: ast.For, name: str) -> bool:
    """Whether ``loop``'s body sets attributes by the name ``name`` holds (``setattr(owner, name, f)``), or gets an
    object by it and assigns an attribute (``cls = getattr(module, name); cls.forward = f``)."""
    nodes = [node for statement in loop.body for node in ast.walk(statement)]

    def by_name(function: str) -> bool:
        return any(
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == function
            and len(node.args) >= 2
            and getattr(node.args[1], "id", None) == name
            for node in nodes
        )

    assigns = any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) for t in n.targets) for n in nodes)
    return by_name("setattr") or (assigns and by_name("getattr"))


def _literal_strings(value: ast.expr, pairs: bool = False) -> frozenset[str] | None:
    """The strings a literal iterates over: a tuple or list of strings, or with ``pairs`` the first items of a tuple
    or list of pairs, or the keys of a dict literal's ``.items()``; None for anything else."""
    if pairs and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "items":
        value = value.func.value
        items = value.keys if isinstance(value, ast.Dict) else []
    elif isinstance(value, ast.Tuple | ast.List):
        items = [e.elts[0] if pairs and isinstance(e, ast.Tuple | ast.List) and e.elts else e for e in value.elts]
    else:
        return None
    if items and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in items):
        return frozenset(e.value for e in items)
    return None


def _registered(dotted: str) -> bool:
    """Whether a string is the full dotted path of a name in a Megatron module (at least a module and a name)."""
    parts = dotted.split(".")
    return len(parts) > 3 and all(part.isidentifier() for part in parts) and is_megatron(dotted)


def _under_megatron(path: str) -> bool:
    return path == _MEGATRON_ROOT or path.startswith(_MEGATRON_ROOT + ".")


class _Resolver:
    """Which Megatron paths an expression denotes, given the names bound so far."""

    def __init__(self, constants: dict[str, str]) -> None:
        self.constants = constants
        self.loop_strings: dict[str, frozenset[str]] = {}
        self.patching_loops: dict[tuple[Path, str], frozenset[str]] = {}
        self.patching_helpers: dict[str, tuple[int, int]] = {}
        """The framework's functions that set an attribute by their parameters (discovery only)."""
        """(file, loop variable) -> the strings a patching loop of that file gives it (discovery only)."""
        self.file: Path | None = None
        """The file being read."""
        self.aliases: dict[str, frozenset[str]] = {}
        self.returns: dict[str, frozenset[str]] = {}
        self.scoped: ScopedNames | None = None
        self.where: Where | None = None
        """The place being read, where names are looked up in the scopes it sees (discovery only)."""

    def strings(self, node: ast.expr) -> frozenset[str]:
        """The strings ``node`` may be: one where :meth:`string` knows it, each a loop variable takes in discovery."""
        known = self.string(node)
        if known is not None:
            return frozenset([known])
        if not isinstance(node, ast.Name):
            return frozenset()
        return self.loop_strings.get(node.id, frozenset()) | self.patching_loops.get((self.file, node.id), frozenset())

    def string(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name):
            return self.constants.get(node.id)
        if isinstance(node, ast.Attribute):
            return self.constants.get(node.attr)
        return None

    def module_named(self, node: ast.expr) -> frozenset[str]:
        name = self.string(node)
        return frozenset([name]) if name is not None and _under_megatron(name) else frozenset()

    def paths(self, node: ast.expr) -> frozenset[str]:
        if isinstance(node, ast.Name):
            if self.scoped is not None and self.where is not None:
                local = self.scoped.lookup(self.where, node.id, self.paths_at)
                if local is not None:
                    return local
            return self.aliases.get(node.id, frozenset())
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("__"):
                return frozenset()
            return frozenset(f"{base}.{node.attr}" for base in self.paths(node.value))
        if isinstance(node, ast.Subscript) and attribute_chain(node.value) == "sys.modules":
            return self.module_named(node.slice)
        if isinstance(node, ast.Call):
            return self._call_paths(node)
        return frozenset()

    def paths_at(self, node: ast.expr, where: Where) -> frozenset[str]:
        """:meth:`paths` of ``node`` as read at ``where``."""
        saved, self.where = self.where, where
        try:
            return self.paths(node)
        finally:
            self.where = saved

    def _call_paths(self, node: ast.Call) -> frozenset[str]:
        callee = attribute_chain(node.func)
        if (callee == "__import__" or gets_module(node)) and node.args:
            return self.module_named(node.args[0])
        if callee == "getattr" and len(node.args) >= 2:
            return frozenset(
                f"{base}.{attr}" for base in self.paths(node.args[0]) for attr in self.strings(node.args[1])
            )
        if self.scoped is not None and self.where is not None:
            return self._returned(self.scoped, self.where, node.func)
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        return self.returns.get(name, frozenset()) if name else frozenset()

    def _returned(self, scoped: ScopedNames, where: Where, func: ast.expr) -> frozenset[str]:
        """What the framework's function ``func`` a call at ``where`` calls returns, read in its own scopes."""
        place = scoped.function(where, func)
        definition = place[1][-1] if place is not None else None
        if place is None or not isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef):
            return frozenset()
        return scoped.returned(
            definition,
            lambda: frozenset(
                found
                for ret in own_returns(definition)
                if ret.value is not None
                for found in self.paths_at(ret.value, place)
            ),
        )


SWEPT = "sys.modules:"
"""The prefix of an assignment's path made by a sweep over ``sys.modules`` (``for m in sys.modules.values(): if
getattr(m, "f", None) is orig: m.f = g``): every module holding ``f`` gets the replacement; which ones are Megatron's
is read from Megatron's source (:func:`~harness.source.framework_scan.scan_framework`)."""


def swept_module(loop: ast.For) -> str | None:
    """The loop variable that holds each module of a loop over ``sys.modules`` (``.values()``, ``.items()``, a copy
    or a ``list`` of either), else ``None``."""
    iterable = loop.iter
    if isinstance(iterable, ast.Call) and getattr(iterable.func, "id", None) in ("list", "tuple") and iterable.args:
        iterable = iterable.args[0]
    method = iterable.func.attr if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) else ""
    if method not in ("values", "items"):
        return None
    base = iterable.func.value
    if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr == "copy":
        base = base.func.value
    if attribute_chain(base) != "sys.modules":
        return None
    target = loop.target
    if method == "items":
        target = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
    return target.id if isinstance(target, ast.Name) else None


def swept_writes(loop: ast.For) -> list[tuple[ast.AST, ast.expr | str, ast.expr]]:
    """What a loop over ``sys.modules`` sets on each module it holds: ``(statement, name, value)``, the name the
    ``setattr`` call's expression (``setattr(m, "f", g)``, ``setattr(m, self.name, g)``) or the attribute written
    (``m.f = g``); nothing for any other loop."""
    module = swept_module(loop)
    writes: list[tuple[ast.AST, ast.expr | str, ast.expr]] = []
    for inner in (n for statement in loop.body for n in ast.walk(statement)) if module else ():
        if isinstance(inner, ast.Call) and getattr(inner.func, "id", None) == "setattr" and len(inner.args) >= 3:
            if getattr(inner.args[0], "id", None) == module:
                writes.append((inner, inner.args[1], inner.args[2]))
        elif isinstance(inner, ast.Assign):
            writes += [
                (inner, target.attr, inner.value)
                for target in inner.targets
                if isinstance(target, ast.Attribute) and getattr(target.value, "id", None) == module
            ]
    return writes


def _sweeps(tree: ast.Module) -> list[ast.expr | str]:
    return [name for node in walked(tree) if isinstance(node, ast.For) for _, name, _ in swept_writes(node)]


def sweeps_any_name(tree: ast.Module) -> bool:
    """Whether a loop over ``sys.modules`` in ``tree`` sets a name it is given, not one written there
    (``setattr(module, self.func_name, new)``): the sweep of a registry's generic apply, which re-binds each record's
    name in every module holding the original."""
    return any(isinstance(name, ast.expr) and not isinstance(name, ast.Constant) for name in _sweeps(tree))


def swept_names(tree: ast.Module) -> set[str]:
    """The attribute names a loop over ``sys.modules`` in ``tree`` sets by a literal name on each module it holds
    (``setattr(m, "f", g)``, ``m.f = g``): names every module holding them gets re-bound."""
    return {
        name if isinstance(name, str) else str(name.value)
        for name in _sweeps(tree)
        if isinstance(name, str) or isinstance(name, ast.Constant)
    }


def attribute_chain(node: ast.expr) -> str | None:
    """``a.b.c`` for a plain name or attribute chain, else ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = attribute_chain(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _bindings(
    trees: Iterable[ast.Module], resolver: _Resolver
) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """Names bound to Megatron objects and functions returning them, given the resolver's current knowledge."""
    bound: dict[str, set[str]] = {}
    tainted: set[str] = set()
    returned: dict[str, set[str]] = {}
    opaque: set[str] = set()

    def bind(name: str, paths: Iterable[str]) -> None:
        paths = set(paths)
        if paths:
            bound.setdefault(name, set()).update(paths)
        else:
            tainted.add(name)

    def taint(target: ast.AST) -> None:
        """Names a target rebinds: ``a`` and ``b`` in ``a, *b = ...``, none in ``a.x = ...`` or ``a[0] = ...``."""
        if isinstance(target, ast.Name):
            tainted.add(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                taint(element)
        elif isinstance(target, ast.Starred):
            taint(target.value)

    for tree in trees:
        for node in walked(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bind(alias.asname, [alias.name] if _under_megatron(alias.name) else [])
                    else:
                        top = alias.name.split(".")[0]
                        bind(top, [top] if top == _MEGATRON_ROOT else [])
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                megatron = node.level == 0 and _under_megatron(module)
                for alias in node.names:
                    if alias.name != "*":
                        bind(alias.asname or alias.name, [f"{module}.{alias.name}"] if megatron else [])
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        bind(target.id, resolver.paths(node.value))
                    else:
                        taint(target)
            elif isinstance(node, ast.NamedExpr):
                bind(node.target.id, resolver.paths(node.value))
            elif isinstance(node, ast.AugAssign | ast.For | ast.AsyncFor | ast.comprehension):
                taint(node.target)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                taint(node.optional_vars)
            elif isinstance(node, ast.ExceptHandler | ast.ClassDef) and node.name:
                tainted.add(node.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                tainted.add(node.name)
                for ret in own_returns(node):
                    paths = resolver.paths(ret.value) if ret.value is not None else frozenset()
                    if paths:
                        returned.setdefault(node.name, set()).update(paths)
                    else:
                        opaque.add(node.name)
    aliases = {name: frozenset(paths) for name, paths in bound.items() if name not in tainted}
    returns = {name: frozenset(paths) for name, paths in returned.items() if name not in opaque}
    return aliases, returns


def own_returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
    """The function's return statements, not those of functions or classes nested in it."""
    found: list[ast.Return] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))
    return found


class _Collector(ast.NodeVisitor):
    """Uses and call sites of one file."""

    def __init__(self, resolver: _Resolver, path: Path, discovery: bool = False) -> None:
        self.resolver = resolver
        self.discovery = discovery
        self.path = path
        self.file = path.name
        self.uses: list[Use] = []
        self.calls: list[CallSite] = []
        self.called: set[str] = set()
        self.assignments: list[Assignment] = []
        self.scope: list[str] = []
        self.chain: list[ast.AST] = []

    def _entered(self, node: ast.AST) -> None:
        """Visit a scope's body with the resolver reading names as that scope sees them."""
        self.chain.append(node)
        if self.resolver.scoped is not None:
            self.resolver.where = (self.path, tuple(self.chain))
        self.generic_visit(node)
        self.chain.pop()
        self.resolver.where = (self.path, tuple(self.chain)) if self.resolver.scoped and self.chain else None

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self._entered(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped
    visit_Module = visit_Lambda = _entered

    def _assigned(self, paths: Iterable[str], value: ast.expr, node: ast.AST, registered: bool = False) -> None:
        paths = tuple(sorted(paths))
        if paths:
            line = getattr(node, "lineno", 0)
            scope = ".".join(self.scope)
            self.assignments.append(Assignment(paths, ast.unparse(value), scope, self.path, line, registered))

    def _record(self, node: ast.Call) -> None:
        """A patch kept as data, as registries of patches hold them: a Megatron module's name, then an attribute
        name, then the value (``Edit("megatron.x.y", "name", replacement)``), or a Megatron name's full dotted path,
        then the value (``register_patch("megatron.x.y.Cls.method", replacement)``), among a call's positional
        arguments; a generic loop applies them later. Also a call of the framework's own function that sets an
        attribute by its parameters, given a Megatron object and a name (``patch_method_source(MLP, "forward")``)."""
        arguments = node.args
        for index in range(len(arguments) - 2):
            modules = self.resolver.module_named(arguments[index])
            attribute = self.resolver.string(arguments[index + 1])
            if modules and attribute and attribute.isidentifier():
                self._assigned((f"{module}.{attribute}" for module in modules), arguments[index + 2], node)
        for path, value in itertools.pairwise(arguments):
            dotted = self.resolver.string(path)
            if dotted and _registered(dotted) and not isinstance(value, ast.Constant):
                self._assigned([dotted], value, node, registered=True)
        helper = self.resolver.patching_helpers.get(getattr(node.func, "id", getattr(node.func, "attr", "")))
        if helper is not None and len(arguments) > max(helper):
            owners = self.resolver.paths(arguments[helper[0]])
            names = self.resolver.strings(arguments[helper[1]])
            self._assigned((f"{owner}.{name}" for owner in owners for name in names), node, node)

    def visit_For(self, node: ast.For) -> None:
        for inner, name, value in swept_writes(node) if self.discovery else ():
            names = [name] if isinstance(name, str) else self.resolver.strings(name)
            self._assigned((f"{SWEPT}{each}" for each in names), value, inner)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Attribute):
                self._assigned(self.resolver.paths(target), node.value, node)
        self.generic_visit(node)

    def _use(self, paths: Iterable[str], node: ast.AST) -> None:
        paths = tuple(sorted(paths))
        if paths:
            self.uses.append(Use(paths, self.file, getattr(node, "lineno", 0)))

    def visit_Import(self, node: ast.Import) -> None:
        self._use((a.name for a in node.names if _under_megatron(a.name)), node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0 and _under_megatron(module):
            self._use((f"{module}.{a.name}" for a in node.names if a.name != "*"), node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self._use(self.resolver.paths(node), node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        paths = self.resolver.paths(node)
        if paths:
            self._use(paths, node)
        else:
            self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._use(self.resolver.paths(node), node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self._use(self.resolver.paths(node), node)
        callee = attribute_chain(node.func)
        self.called |= self.resolver.paths(node.func)
        if self.discovery:
            self._record(node)
        if callee in _ATTRIBUTE_BUILTINS and len(node.args) >= 2:
            attrs = self.resolver.strings(node.args[1])
            if attrs:
                targets = [f"{base}.{attr}" for base in self.resolver.paths(node.args[0]) for attr in sorted(attrs)]
                self._use(targets, node)
                if callee == "setattr" and len(node.args) >= 3:
                    self._assigned(targets, node.args[2], node)
        shapeless = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        if not shapeless:
            keywords = tuple(k.arg for k in node.keywords if k.arg)
            for path in sorted(self.resolver.paths(node.func)):
                self.calls.append(CallSite(path, len(node.args), keywords, self.file, node.lineno, self.path))
        self.generic_visit(node)
