"""A framework's patches of Megatron read from its source without importing it: each assignment that re-binds a name
on a Megatron module or class, the definition bound there, and the originals the framework captured before.

Why a reader of its own beside :mod:`.source_scan`: the scan is built to find every use (a name is an alias when any
binding of it binds Megatron), so ``state.loss.images = v`` in a framework that also imports an ``optimizer`` module
looks like a patch there. Here a name is resolved in the scopes the assignment sees (the module's imports, then those
of each enclosing function, where frameworks import Megatron lazily), and an assignment counts only where its owner
is a Megatron module or a class Megatron's source defines. Patches on built instances (``model.forward = f``) need
the object's class, which the source does not give: they are not read here.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from harness.source.megatron_namespace import is_megatron
from harness.source.package_layout import framework_files
from harness.source.parsing import parsed_file, walked
from harness.source.reader_error import reading
from harness.source.scopes import Scope, bind, block_statements, isinstance_tests
from harness.source.syntax import absolute_module, dotted_name, last_name

METADATA = {"__signature__", "__doc__", "__name__", "__qualname__", "__module__", "__wrapped__", "__annotations__"}
"""Attributes a framework sets on the function it patched in, describing it."""

WRAPPERS = {"staticmethod": "staticmethod", "classmethod": "classmethod", "property": "property"}
"""Calls around a replacement that change how a class binds it."""


@dataclass(frozen=True)
class Definition:
    """A function the framework defines: its syntax tree and where it is."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    file: Path
    module: str

    @property
    def place(self) -> str:
        return f"{self.module.replace('.', '/')}.py:{self.node.lineno}"


@dataclass(frozen=True)
class ClassValue:
    """A class of the framework bound in place of a Megatron name (``gpt_model.TransformerBlock = Block``): what
    Megatron's constructions of the name then bind is the class's own ``__init__``, or the one it inherits."""

    name: str
    place: str
    init: Definition | None
    """The first ``__init__`` along the framework's own classes, the replacement's first."""
    megatron_base: str | None
    """The Megatron class (dotted) whose ``__init__`` it inherits, where no class of the framework defines one."""


@dataclass(frozen=True)
class SourcePatch:
    """One assignment of the framework onto Megatron: ``path`` (dotted, as resolved) gets ``value``."""

    path: str
    value: str
    """The bound expression as written."""
    file: Path
    module: str
    line: int
    scope: tuple[ast.AST, ...]
    """The enclosing function definitions, outermost first (empty at module level), and the statement itself last."""
    definition: Definition | None
    """What the value names, where it is a function of the framework's own source."""
    wrapper: str | None
    """``staticmethod``, ``classmethod`` or ``property`` where the value is wrapped in one."""
    originals: dict[str, str] = field(default_factory=dict)
    """Names the replacement can see that hold a Megatron object captured before the patch: name -> dotted path."""
    names: dict[str, str] = field(default_factory=dict)
    """Every name the assignment sees bound by an import or an alias, the nearest scope's binding: name -> dotted."""
    restores: bool = False
    """The value is Megatron's own object of the same name (a captured original put back): an undo, not a
    replacement. Another Megatron name bound there (``ps._A_GROUP = ps._B_GROUP``) replaces it."""
    constant: bool = False
    """The value is a literal (``Cls._patched = True``): a marker the framework leaves, not a replacement."""
    bound: bool = False
    """The value is a method bound to an instance (``self._get_param_groups``): its first parameter is taken."""
    declared: bool = False
    """Not an assignment found in the source: the declaration names the symbol and its replacement."""
    objects: dict[str, str] = field(default_factory=dict)
    """For a method bound on built objects: the object's expression -> the Megatron class it was resolved to."""
    constructs: ClassValue | None = None
    """Where the value is a class of the framework (named, or held in a class attribute: ``self.block_class``)."""

    @property
    def place(self) -> str:
        if self.declared:
            return f"declared, replaced by {self.value}"
        return f"{self.module.replace('.', '/')}.py:{self.line}"


@dataclass(frozen=True)
class InstancePatch:
    """A method bound on built objects (``obj.m = f.__get__(obj, ...)``, ``types.MethodType(f, obj)``,
    ``obj.__class__.m = f``): the source names the method and the function, not the object's class."""

    method: str
    definition: Definition
    module: str
    line: int
    chain: tuple[ast.AST, ...]
    names: dict[str, str]
    classes: tuple[str, ...]
    """Dotted names the patching function tests the object against (``isinstance(x, GPTModel)``)."""
    target: str
    """The object's expression as written (``self``, ``layer``; ``layer`` also where the patch is set on
    ``layer.__class__``)."""
    hint: str
    """The names around the patch (the function's, the patching function's, the object's expression), lower case
    without underscores: what tells two Megatron classes defining the method apart."""
    wrapper: str | None = None
    """``property`` (or ``staticmethod``, ``classmethod``) where the function is set on the object's class so."""
    plain: bool = False
    """The function is set on the object as it is (``obj.forward = f``), not bound to it: a method replaced only
    where the object's class defines the name as a method; a field set to a function is data."""
    unnamed: bool = False
    """Set as it is on an object (not a module the file imports) nothing in the source names the class of (a
    parameter, another object's attribute):
    a Megatron method only where some Megatron class defines the name, and then listed as unplaced where the names
    around it do not tell which class, never left out unsaid."""

    @property
    def place(self) -> str:
        return f"{self.module.replace('.', '/')}.py:{self.line}"


@dataclass(frozen=True)
class CallStatement:
    """A statement of the framework that calls one of its own functions: where a patching function is run from."""

    called: str
    """The callee as resolved (``verl.models.mcore.patch.apply_patch``, or ``self.method`` within a class)."""
    module: str
    chain: tuple[ast.AST, ...]
    """Enclosing definitions, outermost first, and the statement last."""
    names: dict[str, str]


@dataclass
class FrameworkSource:
    """A framework's modules parsed once: its patches of Megatron and the calls of its own functions."""

    root: Path
    trees: dict[str, tuple[Path, ast.Module]]
    patches: list[SourcePatch] = field(default_factory=list)
    calls: dict[str, list[CallStatement]] = field(default_factory=dict)
    """Last name of the callee -> the statements calling a function of that name."""
    instances: list[InstancePatch] = field(default_factory=list)

    def callers(self, module: str, qualname: tuple[str, ...]) -> list[CallStatement]:
        """The statements that call the framework function ``qualname`` of ``module`` (a method by ``self.``)."""
        name = qualname[-1]
        wanted = f"{module}.{'.'.join(qualname)}"
        found = []
        for call in self.calls.get(name, []):
            inside = tuple(n.name for n in call.chain[:-1] if isinstance(n, ast.ClassDef))
            if self.canonical(call.called) == wanted or (
                call.module == module and call.called == name and len(qualname) == 1
            ):
                found.append(call)
            elif (
                len(qualname) == 2 and call.module == module and call.called == f"self.{name}" and qualname[0] in inside
            ):
                found.append(call)
        return found

    def canonical(self, dotted: str) -> str:
        """``dotted`` with the framework's re-exports followed to the module that defines the name
        (``swift.model.npu_patcher.apply_mindspeed_patches`` is ``swift.model.npu_patch.mindspeed...``)."""
        for _ in range(5):
            parts = dotted.split(".")
            cut = next((i for i in range(len(parts) - 1, 0, -1) if ".".join(parts[:i]) in self.trees), None)
            if cut is None:
                return dotted
            module, head = ".".join(parts[:cut]), parts[cut]
            path, tree = self.trees[module]
            origin = next(
                (
                    (absolute_module(node, module, path.name == "__init__.py"), alias.name)
                    for node in tree.body
                    if isinstance(node, ast.ImportFrom)
                    for alias in node.names
                    if (alias.asname or alias.name) == head
                ),
                None,
            )
            if origin is None:
                return dotted
            dotted = ".".join([origin[0], origin[1], *parts[cut + 1 :]])
        return dotted

    def definition(self, module: str, qualname: str) -> Definition | None:
        """The framework's function ``qualname`` of ``module`` (a method: ``Class.method``), read from its source."""
        if module not in self.trees:
            return None
        path, tree = self.trees[module]
        found = _qualified(tree, qualname.split("."))
        return Definition(found, path, module) if found is not None else None

    def place(self, module: str, line: int) -> str:
        """``file:line`` below the framework's root."""
        return f"{self.trees[module][0].relative_to(self.root).as_posix()}:{line}"


def statement_at(framework: FrameworkSource, path: Path, line: int) -> tuple[str, tuple[ast.AST, ...], dict[str, str]]:
    """The framework's module holding ``path`` (this file, or the same one in another copy of the framework), the
    chain of definitions enclosing the innermost statement at ``line`` (the statement last), and the names its scopes
    bind: what the framework's own checks around any of its statements (a call, not only a patch) are read from.
    ``StopIteration`` where ``path`` is none of its files."""
    # The same files may be read from another copy (the venv's, where the framework is read from its wheel).
    module = next(
        name
        for name, (file, _) in framework.trees.items()
        if path.parts[-len(file.relative_to(framework.root).parts) :] == file.relative_to(framework.root).parts
    )
    tree = framework.trees[module][1]
    scope = _module_scope(module, tree, path)
    names = dict(scope.names)
    chain: list[ast.AST] = []
    body: list[ast.stmt] = tree.body
    while True:
        inner = next((n for n in body if n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        if inner is None:
            break
        if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            chain.append(inner)
            if not isinstance(inner, ast.ClassDef):
                inner_scope = Scope()
                bind(inner_scope, inner.body, module, path.name == "__init__.py")
                names.update(inner_scope.names)
            body = inner.body
            continue
        nested = [b for field in ("body", "orelse", "finalbody") for b in [getattr(inner, field, None)] if b]
        nested += [handler.body for handler in getattr(inner, "handlers", [])]
        holding = next((b for b in nested if any(n.lineno <= line <= (n.end_lineno or n.lineno) for n in b)), None)
        if holding is None:
            chain.append(inner)
            break
        body = holding
    return module, tuple(chain), names


def read_framework(root: Path, is_megatron_owner, packages: Collection[str] | None = None) -> FrameworkSource:
    """Every patch assignment in the framework below ``root`` (its ``packages`` only, where given: a distribution
    in a ``site-packages``), and the calls of its own functions; ``is_megatron_owner(dotted)`` says whether a dotted
    path names a Megatron module or a class Megatron defines (the owner a patch re-binds a name on)."""
    modules = framework_files(root, packages)
    trees = {name: (path, parsed_file(path)) for path, name in modules.items()}
    own = {
        node.name
        for _, tree in trees.values()
        for node in walked(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found = FrameworkSource(root, trees)
    for module, (path, tree) in trees.items():
        reader = _Reader(module, path, trees, is_megatron_owner, own)
        with reading(path):
            reader.read(tree.body, [], [_module_scope(module, tree, path)])
        found.patches += reader.patches
        found.instances += reader.instances
        for call in reader.calls:
            found.calls.setdefault(call.called.rpartition(".")[2], []).append(call)
    return found


def class_bound_for(value: ast.expr) -> str | None:
    """The class, as written, a function is bound as a method of by ``f.__get__(obj, Cls)``: the source names the
    object's class there, whatever the object is."""
    is_get = isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "__get__"
    return dotted_name(value.args[1]) if is_get and len(value.args) == 2 else None


def _module_scope(module: str, tree: ast.Module, path: Path) -> Scope:
    scope = Scope()
    bind(scope, tree.body, module, path.name == "__init__.py")
    return scope


class _Reader:
    def __init__(
        self, module: str, path: Path, trees: dict[str, tuple[Path, ast.Module]], is_megatron_owner, own: set[str]
    ) -> None:
        self.module = module
        self.path = path
        self.trees = trees
        self.is_megatron_owner = is_megatron_owner
        self.own = own
        self.patches: list[SourcePatch] = []
        self.calls: list[CallStatement] = []
        self.instances: list[InstancePatch] = []

    def built_class(self, value: ast.expr, scopes: list[Scope]) -> str | None:
        """The class, as written, of the object a name holds where the nearest scope binding it says (``x =
        Cls(...)``, ``x: Cls``); None for any other expression or binding."""
        if not isinstance(value, ast.Name):
            return None
        for scope in reversed(scopes):
            if value.id in scope.built:
                return scope.built[value.id]
            if value.id in scope.names:
                return None
        return None

    def resolve(self, dotted: str, scopes: list[Scope]) -> str:
        """``dotted`` with its first name replaced by what the nearest scope binds it to (aliases followed)."""
        head, _, rest = dotted.partition(".")
        for _ in range(5):
            bound = next((s.names[head] for s in reversed(scopes) if head in s.names), None)
            if bound is None:
                break
            bound = bound.lstrip("=")
            dotted = f"{bound}.{rest}" if rest else bound
            new_head, _, new_rest = dotted.partition(".")
            if new_head == head:
                break
            head, rest = new_head, new_rest
        return dotted

    def read(self, body: list[ast.stmt], enclosing: list[ast.AST], scopes: list[Scope]) -> None:
        for node in block_statements(body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                scope = Scope()
                bind(scope, node.body, self.module, self.path.name == "__init__.py")
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                for argument in arguments:
                    annotation = dotted_name(argument.annotation) if argument.annotation else None
                    if annotation is not None:
                        scope.built.setdefault(argument.arg, annotation)
                self.read(node.body, [*enclosing, node], [*scopes, scope])
            elif isinstance(node, ast.ClassDef):
                self.read(node.body, [*enclosing, node], [*scopes, Scope()])
            elif isinstance(node, ast.Assign | ast.AugAssign):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Attribute) and not self.assigned(
                        dotted_name(target), node.value, node, enclosing, scopes
                    ):
                        self.on_instances(target, node.value, node, enclosing, scopes)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                call = node.value
                if getattr(call.func, "id", None) == "setattr" and len(call.args) == 3:
                    owner, name, value = call.args
                    for attribute in _names_of(name, node, enclosing) if dotted_name(owner) else ():
                        if not self.assigned(f"{dotted_name(owner)}.{attribute}", value, node, enclosing, scopes):
                            target = ast.Attribute(owner, attribute, ast.Store())
                            self.on_instances(target, value, node, enclosing, scopes)
            self.called(node, enclosing, scopes)

    def called(self, node: ast.stmt, enclosing: list[ast.AST], scopes: list[Scope]) -> None:
        """Record the calls of the framework's own functions this statement makes (not in nested blocks: those are
        statements of their own)."""
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return
        heads = [node.test] if isinstance(node, ast.If | ast.While) else []
        if isinstance(node, ast.With):
            heads = [item.context_expr for item in node.items]
        elif not isinstance(node, ast.If | ast.For | ast.While | ast.Try):
            heads = [node]
        names: dict[str, str] | None = None
        for head in heads:
            for call in (c for c in ast.walk(head) if isinstance(c, ast.Call)):
                written = dotted_name(call.func)
                if written is None or written.rpartition(".")[2] not in self.own:
                    continue
                if names is None:
                    names = {n: self.resolve(n, scopes) for n in {n for scope in scopes for n in scope.names}}
                called = written if written.startswith("self.") else self.resolve(written, scopes)
                self.calls.append(CallStatement(called, self.module, (*enclosing, node), names))

    def on_instances(
        self, target: ast.Attribute, value: ast.expr, node: ast.stmt, enclosing: list[ast.AST], scopes: list[Scope]
    ) -> None:
        """Record ``target = value`` where it binds a function of the framework as a method of built objects."""
        function = None
        wrapper = None
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) in WRAPPERS and len(value.args) == 1:
            wrapper, value = WRAPPERS[value.func.id], value.args[0]
        named_class = class_bound_for(value)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "__get__":
            function = value.func.value
        elif isinstance(value, ast.Call) and last_name(value.func) == "MethodType" and value.args:
            function = value.args[0]
        elif isinstance(target.value, ast.Attribute) and target.value.attr == "__class__":
            function = value
        built = self.built_class(target.value, scopes)
        functions = [n for n in enclosing if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        around = functions[-1] if functions else self.trees[self.module][1]
        narrowed = isinstance_tests(around, ast.unparse(target.value))
        plain = function is None and (built is not None or bool(narrowed))
        root = _root(target.value)
        bound = next((scope.names[root] for scope in reversed(scopes) if root in scope.names), "=") if root else ""
        unnamed = (
            function is None
            and not plain
            and root not in (None, "self", "cls")
            and bound.startswith("=")
            and not _loops_over_written(around, root)
        )
        if plain or unnamed:
            function = value  # a function set as it is on one object, whose class the source may not name
        written = dotted_name(function) if function is not None else None
        definition = self.definition(written, scopes, enclosing) if written else None
        if definition is None or (target.attr.startswith("__") and target.attr != "__call__"):
            return
        tested = [self.resolve(d, scopes) for d in narrowed or isinstance_tests(functions[-1] if functions else None)]
        tested += [self.resolve(built, scopes)] if built is not None else []
        tested += [self.resolve(named_class, scopes)] if named_class is not None else []  # f.__get__(obj, Cls)
        owner = next((n for n in reversed(enclosing) if isinstance(n, ast.ClassDef)), None)
        if functions and owner is not None and not any(is_megatron(t) for t in tested):
            guards = _guards_of_calls(owner, functions[-1].name, ast.unparse(target.value).removesuffix(".__class__"))
            tested += [self.resolve(d, scopes) for d in guards]
        hint = " ".join([definition.node.name, *(f.name for f in functions), ast.unparse(target.value)])
        self.instances.append(
            InstancePatch(
                target.attr,
                definition,
                self.module,
                node.lineno,
                (*enclosing, node),
                {n: self.resolve(n, scopes) for n in {n for scope in scopes for n in scope.names}},
                tuple(t for t in tested if is_megatron(t)),
                ast.unparse(target.value).removesuffix(".__class__"),
                hint.lower().replace("_", ""),
                wrapper,
                plain or unnamed,
                unnamed,
            )
        )

    def assigned(
        self, target: str | None, value: ast.expr, node: ast.stmt, enclosing: list[ast.AST], scopes: list[Scope]
    ) -> bool:
        """Record a patch of Megatron (``True``), where ``target`` names an attribute of a Megatron owner."""
        if target is None:
            return False
        owner, _, name = self.resolve(target, scopes).rpartition(".")
        if not is_megatron(owner) or not self.is_megatron_owner(owner):
            return False
        if name in METADATA:
            return True  # a replacement's own signature or name, set beside its patch: not a patch of its own
        wrapper = None
        inner = value
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) in WRAPPERS and len(value.args) == 1:
            wrapper, inner = WRAPPERS[value.func.id], value.args[0]
        written = dotted_name(inner)
        definition = self.definition(written, scopes, enclosing) if written else None
        constructs = self.class_value(written, scopes, enclosing) if written and definition is None else None
        resolved = self.resolve(written, scopes) if written else None
        restores = (
            definition is None
            and constructs is None
            and bool(resolved and is_megatron(resolved) and resolved.rpartition(".")[2] == name)
        )  # Megatron's own object of that name put back; another of its names bound there replaces it
        if definition is not None and wrapper is None:
            wrapper = _decorated(definition.node)
        captured = {name for scope in scopes for name, bound in scope.names.items() if bound.startswith("=")}
        originals = {name: path for name in captured if is_megatron(path := self.resolve(name, scopes))}
        self.patches.append(
            SourcePatch(
                f"{owner}.{name}",
                ast.unparse(value),
                self.path,
                self.module,
                node.lineno,
                (*enclosing, node),
                definition,
                wrapper,
                originals,
                {name: self.resolve(name, scopes) for name in {n for scope in scopes for n in scope.names}},
                restores,
                isinstance(value, ast.Constant),
                bool(written and written.split(".")[0] in ("self", "cls") and written.count(".") == 1),
                constructs=constructs,
            )
        )
        return True

    def class_value(self, written: str, scopes: list[Scope], enclosing: list[ast.AST]) -> ClassValue | None:
        """The framework class ``written`` names: directly, or through the enclosing class's attribute it reads
        (``self.transformer_block`` where the class body says ``transformer_block = TransformerBlock``)."""
        head, _, rest = written.partition(".")
        owner = next((n for n in reversed(enclosing) if isinstance(n, ast.ClassDef)), None)
        if head in ("self", "cls") and owner is not None and rest and "." not in rest:
            held = next(
                (
                    node.value
                    for node in owner.body
                    if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == rest for t in node.targets)
                ),
                None,
            )
            written = dotted_name(held) if held is not None else None
            if written is None:
                return None
            scopes = scopes[:1]  # a class body's names are the module's
        found = self.framework_class(self.module, self.resolve(written, scopes))
        if found is None:
            return None
        module, node = found
        init, base = self.constructor(module, node)
        return ClassValue(node.name, f"{module.replace('.', '/')}.py:{node.lineno}", init, base)

    def framework_class(self, module: str, dotted: str) -> tuple[str, ast.ClassDef] | None:
        """The module and class definition ``dotted`` names among the framework's modules (a name of ``module``
        itself where it has no dot), re-exports followed."""
        for _ in range(5):
            if "." not in dotted:
                dotted = f"{module}.{dotted}"
            module, _, name = dotted.rpartition(".")
            if module not in self.trees:
                return None
            path, tree = self.trees[module]
            found = next(
                (n for n in block_statements(tree.body) if isinstance(n, ast.ClassDef) and n.name == name), None
            )
            if found is not None:
                return module, found
            scope = _module_scope(module, tree, path)
            if name not in scope.names:
                return None
            dotted = scope.names[name].lstrip("=")
        return None

    def constructor(self, module: str, node: ast.ClassDef) -> tuple[Definition | None, str | None]:
        """The ``__init__`` a framework class's instances run (its own, or the first along its framework bases),
        else the Megatron base it inherits one from (dotted)."""
        for _ in range(10):
            path, tree = self.trees[module]
            init = _method(node, "__init__")
            if init is not None:
                return Definition(init, path, module), None
            base = dotted_name(node.bases[0]) if node.bases else None
            if base is None:
                return None, None
            resolved = self.resolve(base, [_module_scope(module, tree, path)])
            if is_megatron(resolved):
                return None, resolved
            found = self.framework_class(module, resolved)
            if found is None:
                return None, None
            module, node = found
        return None, None

    def definition(self, written: str, scopes: list[Scope], enclosing: list[ast.AST]) -> Definition | None:
        """The function ``written`` names: a def in an enclosing scope, a method of a class of the framework
        (``Cls.method``), or a function another module of the framework defines and this one imports."""
        head, _, rest = written.partition(".")
        local = self.local_definition(head, enclosing) if not rest else None
        if local is not None:
            return Definition(local, self.path, self.module)
        owner = next((n for n in reversed(enclosing) if isinstance(n, ast.ClassDef)), None)
        if head == "self" and owner is not None and "." not in rest:
            method = _method(owner, rest)
            return Definition(method, self.path, self.module) if method else None
        for scope in reversed(scopes):
            if not rest and head in scope.functions:
                return Definition(scope.functions[head], self.path, self.module)
            if rest and "." not in rest and head in scope.classes:
                method = _method(scope.classes[head], rest)
                return Definition(method, self.path, self.module) if method else None
        dotted = self.resolve(written, scopes)
        for cut in range(dotted.count("."), 0, -1):
            parts = dotted.split(".")
            module, qualname = ".".join(parts[:cut]), parts[cut:]
            if module in self.trees:
                path, tree = self.trees[module]
                found = _qualified(tree, qualname)
                return Definition(found, path, module) if found else None
        return None

    def local_definition(self, name: str, enclosing: list[ast.AST]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """A def of ``name`` in the innermost enclosing function: it shadows an import of the same name (a fallback
        defined in ``except ImportError``)."""
        functions = [n for n in enclosing if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        body = functions[-1].body if functions else []
        return next(
            (
                n
                for n in block_statements(body)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name
            ),
            None,
        )


def _names_of(name: ast.expr, statement: ast.stmt, enclosing: list[ast.AST]) -> list[str]:
    """The attribute names a ``setattr`` sets: a literal, or each string of the literal tuple a ``for`` loop around
    it runs over (``for name in ("a", "b"): setattr(module, name, f)``)."""
    if isinstance(name, ast.Constant) and isinstance(name.value, str):
        return [name.value]
    if not isinstance(name, ast.Name):
        return []
    functions = [n for n in enclosing if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for loop in (n for n in ast.walk(functions[-1]) if isinstance(n, ast.For)) if functions else ():
        inside = any(s is statement for s in ast.walk(loop))
        if inside and isinstance(loop.target, ast.Name) and loop.target.id == name.id:
            items = loop.iter.elts if isinstance(loop.iter, ast.Tuple | ast.List) else []
            return [e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)


def _qualified(tree: ast.Module, qualname: list[str]) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    body: list[ast.stmt] = tree.body
    for index, part in enumerate(qualname):
        last = index == len(qualname) - 1
        found = next(
            (
                n
                for n in block_statements(body)
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
            ),
            None,
        )
        if found is None:
            return None
        if last:
            return found if isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef) else None
        if not isinstance(found, ast.ClassDef):
            return None
        body = found.body
    return None


def _decorated(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        name = getattr(decorator, "id", None)
        if name in WRAPPERS:
            return WRAPPERS[name]
    return None


def _loops_over_written(around: ast.AST, name: str) -> bool:
    """Whether ``name`` is the variable of a loop over a written list or tuple in ``around`` (``for m in [A, B]``):
    objects the source names, which the source scan reads, not objects of a class it cannot say."""
    return any(
        isinstance(node, ast.For)
        and isinstance(node.iter, ast.List | ast.Tuple)
        and name in {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        for node in ast.walk(around)
    )


def _root(expression: ast.expr) -> str | None:
    """The name an attribute chain starts from (``model`` of ``model.decoder.layers[0]``)."""
    while isinstance(expression, ast.Attribute | ast.Subscript | ast.Call):
        expression = expression.value if not isinstance(expression, ast.Call) else expression.func
    return expression.id if isinstance(expression, ast.Name) else None


def _guards_of_calls(owner: ast.ClassDef, method: str, target: str) -> list[str]:
    """The classes ``target`` (``self.base_layer``) is tested against where the class's own methods call
    ``self.<method>()`` only under ``isinstance(target, ...)``: a patching method whose object's class its callers
    decide (mcore-bridge's ``_patch_router_gating``, entered under ``isinstance(self.base_layer, TopKRouter)``)."""
    guards: list[str] = []
    for branch in ast.walk(owner):
        if not isinstance(branch, ast.If):
            continue
        test = branch.test
        if not (
            isinstance(test, ast.Call)
            and getattr(test.func, "id", None) == "isinstance"
            and len(test.args) == 2
            and ast.unparse(test.args[0]) == target
        ):
            continue
        calls = (n for statement in branch.body for n in ast.walk(statement) if isinstance(n, ast.Call))
        if any(ast.unparse(call.func) == f"self.{method}" for call in calls):
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            guards += [d for d in map(dotted_name, kinds) if d]
    return guards
