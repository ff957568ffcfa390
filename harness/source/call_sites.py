"""Megatron's own calls of a symbol a framework replaces, read from the source installed on the target.

A replacement is only as good as its fit to the calls Megatron makes. A replaced method is reached through
``self.<name>(...)`` from the methods of its class, of the subclasses that inherit it, and of the bases whose
caller the class inherits; a replaced function through its name where a module imported it, or through an imported
module (``<alias>.<name>(...)``). A call inside a function the same declaration also replaces is not Megatron's any
more and is left out. Calls Megatron makes through ``nn.Module.__call__`` (a ``forward``) or through an object whose
class is only known at run time are not resolved from source: a replaced symbol with no call site found is reported
as such, never green by silence.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import linecache
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.source.parsing import parsed_file, walked
from harness.source.syntax import absolute_module

_CLASS_HEADER = re.compile(r"^[ \t]*class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.MULTILINE)


@dataclass(frozen=True)
class MegatronCall:
    """One call in Megatron's source: where, from which function, with what, and how many values it unpacks."""

    file: str
    """Path under site-packages: ``megatron/core/transformer/multi_latent_attention.py``."""
    line: int
    caller: str
    """``module:qualname`` of the function the call is in."""
    positional: int
    keywords: tuple[str, ...]
    star_args: bool
    star_kwargs: bool
    unpacks: int | None
    """The number of names the result is unpacked into (``a, b, c = ...``); None when it is not unpacked."""
    name: str = ""
    """What is called, as written (``f``, ``self.f``, ``grads.f``)."""
    bound_at: str | None = None
    """Where the name called was bound by value to the replaced function (``file:line``); None when the call looks
    it up where the patch re-binds it."""
    through_class: bool = False
    """Called on a class by its name (``TransformerConfig.f(...)``): a plain method then gets its instance among
    the positional arguments, where a call on ``self`` passes it implicitly."""
    read: bool = False
    """Not a call but a read of the attribute (``x = self.name``): what Megatron does with a property."""

    @property
    def place(self) -> str:
        return f"{self.file}:{self.line}"

    def describe(self) -> str:
        if self.read:
            return f"{self.place} ({self.caller.split(':')[-1]}: reads {self.name})"
        passed = [f"{self.positional} positional", *(f"{k}=" for k in self.keywords)]
        passed += ["*args"] * self.star_args + ["**kwargs"] * self.star_kwargs
        return f"{self.place} ({self.caller.split(':')[-1]}: {', '.join(passed)})"


@dataclass(frozen=True)
class _ClassInfo:
    module: str
    name: str
    bases: tuple[str, ...]
    """Base names as written, reduced to their last part (``nn.Module`` -> ``Module``)."""


class MegatronSource:
    """The installed ``megatron`` package's source, read once: class headers of every file, and the syntax tree of
    the files that mention a name asked about."""

    def __init__(self, site_packages: Path) -> None:
        self.root = site_packages
        self._trees: dict[Path, ast.Module] = {}
        self._edited: set[Path] = set()
        """Files whose text is a mutant's edit held in ``linecache``, not what is on disk."""
        self._import_words: dict[str, frozenset[str]] = {}
        self._names_of: dict[tuple[str, str], list[tuple[str, set[str], set[str], dict[str, str]]]] = {}
        self._methods: dict[_ClassInfo, dict[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}

    @classmethod
    def installed(cls) -> MegatronSource:
        """The source of the megatron-core this interpreter imports."""
        spec = importlib.util.find_spec("megatron.core")
        if spec is None or spec.origin is None:
            raise RuntimeError("megatron.core is not installed in this interpreter")
        return cls(Path(spec.origin).resolve().parents[2])

    @cached_property
    def texts(self) -> dict[str, tuple[Path, str]]:
        """Module name -> (file, text) of every module of the package."""
        found = {}
        # A Megatron mutant's edited text is in linecache under the installed path as the import system found it
        # (targets.in_place_mutant); the root here is resolved, so a venv reached through a symbolic link is looked up
        # by its resolved path.
        cached_lines = {
            Path(file).resolve(): entry[2]
            for file, entry in list(linecache.cache.items())
            if len(entry) == 4 and file.endswith(".py") and "megatron" in file
        }
        for path in sorted((self.root / "megatron").rglob("*.py")):
            parts = path.relative_to(self.root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            cached = cached_lines.get(path)
            text = "".join(cached) if cached else path.read_text(encoding="utf-8", errors="replace")
            found[name] = (path, text)
            if cached:
                self._edited.add(path)
        return found

    @cached_property
    def classes(self) -> dict[str, list[_ClassInfo]]:
        """Class name -> every class of that name, with its bases, from the class headers of every file."""
        index: dict[str, list[_ClassInfo]] = {}
        for module, (_, text) in self.texts.items():
            for match in _CLASS_HEADER.finditer(text):
                bases = tuple(
                    base.strip().split("[")[0].split(".")[-1]
                    for base in (match.group(2) or "").split(",")
                    if base.strip() and "=" not in base
                )
                index.setdefault(match.group(1), []).append(_ClassInfo(module, match.group(1), bases))
        return index

    def tree(self, module: str) -> ast.Module | None:
        path, text = self.texts[module]
        if path not in self._trees:
            try:  # a file as it is on disk is parsed once for every reader of it
                self._trees[path] = ast.parse(text) if path in self._edited else parsed_file(path)
            except SyntaxError:
                return None
        return self._trees[path]

    def file_of(self, module: str) -> str:
        return self.texts[module][0].relative_to(self.root).as_posix()

    def methods(self, info: _ClassInfo) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
        """The functions defined in the class body of ``info``."""
        if info not in self._methods:
            tree = self.tree(info.module)
            classes = classes_in(tree).get(info.name, []) if tree else []
            body = classes[0].body if classes else []
            self._methods[info] = {f.name: f for f in body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
        return self._methods[info]

    def _class(self, name: str, near: str) -> _ClassInfo | None:
        """The class ``name`` in a base list of module ``near`` means: one of that module, else the one its imports
        name, else the only class of that name."""
        candidates = self.classes.get(name, [])
        same = [c for c in candidates if c.module == near]
        if same or len(candidates) <= 1:
            return (same or candidates or [None])[0]
        tree = self.tree(near)
        for node in walked(tree) if tree is not None else ():
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                source = absolute_module(node, near, self.is_package(near))
                return next((c for c in candidates if c.module == source or c.module.startswith(f"{source}.")), None)
        return None

    def is_package(self, module: str) -> bool:
        return self.texts[module][0].name == "__init__.py"

    @cached_property
    def _by_base(self) -> dict[str, list[_ClassInfo]]:
        """Base name -> the classes that name it among their bases."""
        by_base: dict[str, list[_ClassInfo]] = {}
        for infos in self.classes.values():
            for info in infos:
                for base in info.bases:
                    by_base.setdefault(base, []).append(info)
        return by_base

    def descendants(self, owner: _ClassInfo) -> list[_ClassInfo]:
        """``owner`` and the classes that derive from it in Megatron's source."""
        found, names = [owner], [owner.name]
        while names:
            for info in self._by_base.get(names.pop(), []):
                if info not in found and owner in self.mro(info):
                    found.append(info)
                    names.append(info.name)
        return found

    def mro(self, info: _ClassInfo) -> list[_ClassInfo]:
        """``info`` and its bases in Megatron's source, depth first (Megatron's hierarchies are single-inheritance
        where it matters: a class and its mixins)."""
        order, stack = [], [info]
        while stack:
            current = stack.pop(0)
            if current in order:
                continue
            order.append(current)
            stack = [b for b in (self._class(n, current.module) for n in current.bases) if b is not None] + stack
        return order

    def definer(self, info: _ClassInfo, name: str) -> _ClassInfo | None:
        """The class whose definition of ``name`` an instance of ``info`` finds."""
        return next((c for c in self.mro(info) if name in self.methods(c)), None)

    def calls_of(self, symbol: str, replaced: Iterable[str] = ()) -> list[MegatronCall]:
        """Megatron's calls of ``symbol`` (``module:qualname``), those inside the functions named in ``replaced``
        (``module:qualname``, the declaration's other replaced symbols) left out."""
        module, _, qualname = symbol.partition(":")
        skipped = set(replaced)
        if "." in qualname:
            owner_name, _, method = qualname.rpartition(".")
            owner = self.class_named(module, owner_name)
            found = self._method_calls(owner, method) if owner is not None else []
        else:
            found = self._function_calls(module, qualname)
        return [call for call in found if call.caller not in skipped]

    def class_named(self, module: str, name: str) -> _ClassInfo | None:
        """The class ``name`` defined in ``module``."""
        return next((c for c in self.classes.get(name, []) if c.module == module), None)

    def reaches(self, owner: _ClassInfo, method: str, classes: list[_ClassInfo]) -> bool:
        """Whether a lookup of ``method`` along ``classes`` (an MRO) finds what the patch binds on ``owner``: the
        patch binds the name on the owner, whether the owner defined it or inherited it."""
        return next((c for c in classes if c == owner or method in self.methods(c)), None) == owner

    def _method_calls(self, owner: _ClassInfo, method: str, reads: bool = False) -> list[MegatronCall]:
        callers: list[tuple[_ClassInfo, str, bool]] = []
        for info in self.descendants(owner):
            if self.reaches(owner, method, self.mro(info)):
                callers += [(info, name, False) for name in self.methods(info)]
            if info != owner and self.reaches(owner, method, self.mro(info)[1:]):
                callers += [(info, name, True) for name in self.methods(info)]
        for base in self.mro(owner)[1:]:
            callers += [(base, name, False) for name in self.methods(base) if self.definer(owner, name) == base]
        calls = []
        for info, name, through_super in dict.fromkeys(callers):
            if method not in self.texts[info.module][1]:
                continue
            function = self.methods(info)[name]
            caller = f"{info.module}:{info.name}.{name}"
            if reads:
                calls += _reads_in(function, self.file_of(info.module), caller, method)
                continue
            matches = _is_super_call(method) if through_super else is_self_call(method)
            calls += calls_in(function, self.file_of(info.module), caller, matches)
        return calls if reads else calls + self._class_calls(owner, method)

    def _class_calls(self, owner: _ClassInfo, method: str) -> list[MegatronCall]:
        """Calls of ``method`` on the class by name (``Owner.method(...)``, or a subclass's name that inherits it),
        wherever Megatron makes them."""
        names = {info.name for info in self.descendants(owner) if self.reaches(owner, method, self.mro(info))}
        calls = []
        for module, (_, text) in self.texts.items():
            if not any(f"{name}.{method}(" in text for name in names):
                continue
            tree = self.tree(module)
            for function, qualname in functions_of(tree) if tree is not None else ():
                found = calls_in(function, self.file_of(module), f"{module}:{qualname}", _is_named_on(method, names))
                calls += [replace(call, through_class=True) for call in found]
        return calls

    def reads_of(self, symbol: str, replaced: Iterable[str] = ()) -> list[MegatronCall]:
        """Megatron's reads of ``module:Class.name`` on an instance (``self.name`` not called): what a property is
        for. Reads inside the functions named in ``replaced`` are left out."""
        module, _, qualname = symbol.partition(":")
        owner_name, _, name = qualname.rpartition(".")
        owner = self.class_named(module, owner_name)
        found = self._method_calls(owner, name, reads=True) if owner is not None and owner_name else []
        return [read for read in found if read.caller not in set(replaced)]

    def held_when_built(self, symbol: str) -> list[MegatronCall]:
        """Where the constructors of ``module:Class.method``'s class (its own and its bases') read ``self.method``
        without calling it (``weak_method(self.forward_impl)`` handed to a base): the bound method is kept before any
        built object exists, so a method swapped on the object afterwards is never called through what was kept."""
        module, _, qualname = symbol.partition(":")
        owner_name, _, name = qualname.rpartition(".")
        owner = self.class_named(module, owner_name) if owner_name else None
        found = []
        for info in self.mro(owner) if owner is not None else ():
            init = self.methods(info).get("__init__")
            if init is not None and name in self.texts[info.module][1]:
                found += _reads_in(init, self.file_of(info.module), f"{info.module}:{info.name}.__init__", name)
        return found

    def set_when_built(self, info: _ClassInfo) -> dict[str, str]:
        """The attributes the class's own constructor sets on ``self`` (in ``__init__`` and the methods it calls on
        ``self``), each with the ``file:line`` of its first assignment: what ``hasattr`` finds on its built objects
        besides its methods."""
        init = self.methods(info).get("__init__")
        if init is None:
            return {}
        called = {
            node.func.attr
            for node in ast.walk(init)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
        }
        bodies = [init, *(self.methods(info)[name] for name in called if name in self.methods(info))]
        found: dict[str, str] = {}
        for node in sorted(
            (n for body in bodies for n in ast.walk(body) if isinstance(n, ast.Assign | ast.AnnAssign)),
            key=lambda n: n.lineno,
        ):
            for written in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for target in ast.walk(written):
                    if isinstance(target, ast.Attribute) and getattr(target.value, "id", None) == "self":
                        found.setdefault(target.attr, f"{self.file_of(info.module)}:{node.lineno}")
        return found

    def has_when_built(self, info: _ClassInfo, name: str) -> bool:
        """Whether built objects of ``info`` have ``name``: a method along its bases, or an attribute a constructor
        along them sets."""
        return self.definer(info, name) is not None or any(name in self.set_when_built(c) for c in self.mro(info))

    def _function_calls(self, module: str, name: str) -> list[MegatronCall]:
        calls = []
        for other, names, modules, bindings in self._function_names(module, name):
            tree = self.tree(other)
            for function, qualname in functions_of(tree) if tree is not None else ():
                found = calls_in(
                    function, self.file_of(other), f"{other}:{qualname}", _is_named_call(name, names, modules)
                )
                calls += [
                    replace(call, bound_at=bindings[call.name]) if call.name in bindings else call for call in found
                ]
        return calls

    def _imported_words(self, module: str) -> frozenset[str]:
        """The words of ``module``'s import statements, read from its text without parsing it."""
        if module not in self._import_words:
            self._import_words[module] = import_words(self.texts[module][1])
        return self._import_words[module]

    def exporters(self, module: str, name: str) -> set[str]:
        """``module`` and the packages that re-export its ``name`` at module level (``from .config import
        TransformerConfig`` in ``megatron/core/transformer/__init__.py``): an import of the name from any of them
        binds the same object."""
        found = {module}
        for _ in range(3):
            added = set()
            for other, (path, text) in self.texts.items():
                if other in found or name not in text or path.name != "__init__.py":
                    continue
                tree = self.tree(other)
                for node in tree.body if tree is not None else ():
                    if isinstance(node, ast.ImportFrom) and (node.module is not None or node.level):
                        source = absolute_module(node, other, True)
                        if source in found and any(a.name == name and a.asname is None for a in node.names):
                            added.add(other)
            if not added:
                break
            found |= added
        return found

    def held_by_value(self, symbol: str) -> list[tuple[str, str]]:
        """``(module, name)`` of each name Megatron binds a module-level function to by value at import, without
        reading whether it is called there (:meth:`bindings_of` does)."""
        module, _, name = symbol.partition(":")
        return [(other, alias) for other, _, _, bindings in self._function_names(module, name) for alias in bindings]

    def bindings_of(self, symbol: str) -> list[ValueBinding]:
        """Where Megatron binds a replaced module-level function to another name by value (``from x import f`` in
        another module, ``g = f`` at module level), and whether it calls it through that name."""
        module, _, name = symbol.partition(":")
        if "." in name:
            return []
        called = {(call.file, call.name) for call in self._function_calls(module, name)}
        found = []
        for other, _, _, bindings in self._function_names(module, name):
            for alias, place in bindings.items():
                found.append(ValueBinding(place, other, alias, (self.file_of(other), alias) in called))
        return found

    def _function_names(self, module: str, name: str) -> list[tuple[str, set[str], set[str], dict[str, str]]]:
        """For each module that can call ``module.name``: the names it calls it by, the names of ``module`` it holds,
        and of those names the ones bound by value when the module is imported, with where (an import inside a
        function binds when the function runs, after a patch made at import or by an apply)."""
        if (module, name) in self._names_of:
            return self._names_of[(module, name)]
        found = []
        parent, _, last = module.rpartition(".")
        exporters = self.exporters(module, name)
        for other, (_, text) in self.texts.items():
            if name not in text or (other != module and not {name, last} & self._imported_words(other)):
                continue  # a module binding the name, or the module, names it in an import statement
            tree = self.tree(other)
            if tree is None:
                continue
            names, modules, bindings = set(), set(), {}
            if other == module:
                names.add(name)
                for node in tree.body:
                    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == name:
                        for target in (t for t in node.targets if isinstance(t, ast.Name)):
                            names.add(target.id)
                            bindings[target.id] = f"{self.file_of(other)}:{node.lineno}"
            for node in walked(tree):
                if isinstance(node, ast.ImportFrom) and (node.module is not None or node.level):
                    source = absolute_module(node, other, self.is_package(other))
                    for alias in node.names:
                        if source in exporters and alias.name == name:
                            names.add(alias.asname or name)
                            if id(node) not in imports_at_call(tree):
                                bindings[alias.asname or name] = (
                                    f"{self.file_of(other)}:{getattr(alias, 'lineno', node.lineno)}"
                                )
                        elif source == parent and alias.name == last:
                            modules.add(alias.asname or last)
                elif isinstance(node, ast.Import):
                    modules.update(alias.asname for alias in node.names if alias.name == module and alias.asname)
            if names or modules:
                found.append((other, names, modules, bindings))
        self._names_of[(module, name)] = found
        return found


_IMPORT_STATEMENT = re.compile(
    r"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(\([^)]*\)|(?:[^\n]*\\\n)*[^\n]*)", re.MULTILINE
)
"""An import statement's names: a parenthesised list over several lines, or the rest of its line."""


def import_words(text: str) -> frozenset[str]:
    """The words of a module's import statements, read from its text without parsing it: a name the module binds
    by an import is among them."""
    return frozenset(word for statement in _IMPORT_STATEMENT.findall(text) for word in re.findall(r"\w+", statement))


@functools.cache
def imports_at_call(tree: ast.Module) -> frozenset[int]:
    """``id`` of each ``from ... import`` inside a function of ``tree``: it runs when the function runs, after a
    patch made at import or by an apply, so it binds the patched object, not a copy of the original."""
    found = set()
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        if inside and isinstance(node, ast.ImportFrom):
            found.add(id(node))
        inner = inside or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return frozenset(found)


@dataclass(frozen=True)
class ValueBinding:
    """A name Megatron binds to a replaced function by value: a patch of the function's module does not reach it."""

    place: str
    module: str
    alias: str
    called: bool


def calls_in_replacement(function: Any, method: str, caller: str) -> list[MegatronCall]:
    """The ``self.<method>(...)`` calls in a replacement's own source: where a declaration replaces both a method
    and a method that calls it, the caller's copy is what calls the other replacement."""
    try:
        lines, start = inspect.getsourcelines(inspect.unwrap(function))
        file = inspect.getsourcefile(inspect.unwrap(function)) or "<unknown>"
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return []
    ast.increment_lineno(tree, start - 1)
    return calls_in(tree, Path(file).name, caller, is_self_call(method))


@functools.cache
def classes_in(tree: ast.Module) -> dict[str, list[ast.ClassDef]]:
    """The classes a module defines anywhere in it, by name."""
    found: dict[str, list[ast.ClassDef]] = {}
    for node in walked(tree):
        if isinstance(node, ast.ClassDef):
            found.setdefault(node.name, []).append(node)
    return found


def functions_of(tree: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function of a module with its qualname (nested ones under their enclosing function's)."""
    found = []
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((child, f"{prefix}{child.name}"))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, f"{prefix}{child.name}."))
    return found


def is_self_call(method: str):
    """``self.<method>(...)``, and ``cls.<method>(...)`` in a class method."""
    return _is_named_on(method, {"self", "cls"})


def _is_named_on(method: str, owners: set[str]):
    def matches(func: ast.expr) -> bool:
        return (
            isinstance(func, ast.Attribute)
            and func.attr == method
            and isinstance(func.value, ast.Name)
            and func.value.id in owners
        )

    return matches


def _reads_in(function: ast.AST, file: str, caller: str, name: str) -> list[MegatronCall]:
    """The ``self.<name>`` reads in ``function``'s body that are not calls (nor assignments to it)."""
    called = {id(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)}
    found = [
        MegatronCall(file, node.lineno, caller, 0, (), False, False, None, f"self.{name}", read=True)
        for node in ast.walk(function)
        if isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.ctx, ast.Load)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and id(node) not in called
    ]
    return sorted(found, key=lambda read: read.line)


def _is_super_call(method: str):
    def matches(func: ast.expr) -> bool:
        return (
            isinstance(func, ast.Attribute)
            and func.attr == method
            and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name)
            and func.value.func.id == "super"
        )

    return matches


def _is_named_call(name: str, names: set[str], modules: set[str]):
    def matches(func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in names
        return (
            isinstance(func, ast.Attribute)
            and func.attr == name
            and isinstance(func.value, ast.Name)
            and func.value.id in modules
        )

    return matches


def calls_in(function: ast.AST, file: str, caller: str, matches) -> list[MegatronCall]:
    """The matching calls in ``function``'s body (nested functions included: they run on its behalf)."""
    unpacked: dict[int, int] = {}
    for node in walked(function):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Tuple | ast.List) and not any(isinstance(e, ast.Starred) for e in target.elts):
                unpacked[id(node.value)] = len(target.elts)
    found = []
    for node in walked(function):
        if isinstance(node, ast.Call) and matches(node.func):
            found.append(
                MegatronCall(
                    file=file,
                    line=node.lineno,
                    caller=caller,
                    positional=sum(1 for a in node.args if not isinstance(a, ast.Starred)),
                    keywords=tuple(k.arg for k in node.keywords if k.arg is not None),
                    star_args=any(isinstance(a, ast.Starred) for a in node.args),
                    star_kwargs=any(k.arg is None for k in node.keywords),
                    unpacks=unpacked.get(id(node)),
                    name=ast.unparse(node.func),
                )
            )
    return sorted(found, key=lambda call: call.line)
