"""What a framework's source touches in Megatron, read without importing it: the material of a starter declaration
(:mod:`harness.source.starter`).

Every Megatron symbol the source imports, calls, reads or binds is found by the api-fingerprint family's source scan
(:mod:`harness.source.source_scan`), then named as ``module:qualname`` against Megatron's own
source trees (the built target venvs'): the longest dotted prefix that is a module file is the module. A symbol that
some of those trees lack is optional. For a symbol the framework binds (a patch), the functions of the same Megatron
module that call it are the ones it relies on: Megatron's own call sites reach the replacement through them.
"""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.source.call_sites import MegatronSource, import_words
from harness.source.megatron_namespace import is_megatron
from harness.source.package_layout import framework_files
from harness.source.parsing import parsed_file, walked
from harness.source.source_scan import (
    SWEPT,
    Assignment,
    SourceScan,
    scan_sources,
    sweeps_any_name,
    swept_module,
)
from harness.source.syntax import absolute_module, dotted_name


@dataclass(frozen=True)
class Symbol:
    """A Megatron symbol the framework touches, with how (``imports``, ``calls``, ``reads``, ``replaces``), where,
    and whether some Megatron tree lacks it."""

    key: str
    usage: str
    places: tuple[str, ...]
    optional: bool = False
    replacement: str | None = None
    """``module:qualname`` of the framework's function bound in its place, where the source names one."""


@dataclass(frozen=True)
class Patch:
    """One patch assignment: the Megatron symbol, the value bound, and the framework function that binds it."""

    key: str
    value: str
    module: str
    scope: str
    place: str


@dataclass
class FrameworkScan:
    """What :func:`scan_framework` found."""

    root: Path
    modules: dict[Path, str]
    symbols: list[Symbol] = field(default_factory=list)
    patches: list[Patch] = field(default_factory=list)
    trees: dict[str, ast.Module] = field(default_factory=dict)
    """The framework's modules parsed, by dotted name, for the guesses."""
    megatron: tuple[Path, ...] = ()
    """The Megatron trees the symbols are named against, the reference first."""
    packages: tuple[str, ...] | None = None
    """The top-level packages read (a distribution's), or ``None``: every package below ``root``."""


def scan_framework(
    root: Path, megatron_trees: Sequence[Path], packages: Collection[str] | None = None
) -> FrameworkScan:
    """The Megatron symbols and patches of the framework under ``root`` (its ``packages`` only, where given), named
    against ``megatron_trees`` (folders holding a ``megatron`` package; the first is the reference for
    ``relies``)."""
    modules = framework_files(root, packages)
    scan = scan_sources(modules, discovery=True, modules=modules)
    trees = tuple(megatron_trees)
    found = FrameworkScan(
        root,
        modules,
        trees={name: parsed_file(path) for path, name in modules.items()},
        megatron=trees,
        packages=tuple(packages) if packages is not None else None,
    )
    replaced: dict[str, tuple[str | None, list[str]]] = {}
    generic_sweep = any(sweeps_any_name(tree) for tree in found.trees.values())
    for assignment in scan.assignments:
        keys = (
            swept_keys(path.removeprefix(SWEPT), trees) if path.startswith(SWEPT) else [symbol_key(path, trees)]
            for path in assignment.paths
        )
        if assignment.registered and generic_sweep:
            keys = itertools.chain(keys, (holders_of(symbol_key(path, trees), trees) for path in assignment.paths))
        for key in (key for found in keys for key in found):
            if key is None:
                continue
            module = modules[assignment.file]
            found.patches.append(Patch(key, assignment.value, module, assignment.scope, _place(assignment)))
            function = _function_named(found.trees[module], assignment.value)
            replacement, places = replaced.setdefault(key, (None, []))
            replaced[key] = (
                replacement or (f"{module}:{function}" if function else None),
                [*places, _place(assignment)],
            )
    found.symbols = _symbols(scan, trees, replaced, modules)
    _by_name(found, trees)
    return found


def _by_name(found: FrameworkScan, trees: tuple[Path, ...]) -> None:
    """Symbols reached through objects the name binding cannot follow (``self.fmg._reshard_if_dtensor``,
    ``getattr(ddp_config, "use_megatron_fsdp")``): an attribute name the framework uses that a Megatron module it
    reaches defines at module level, or that is a field of one of Megatron's config classes."""
    if not trees:
        return
    used, called, set_names = _attribute_names(found.trees.values())
    known = {symbol.key for symbol in found.symbols}
    reached = {key.partition(":")[0] for key in known} | _module_strings(found.trees.values(), trees)
    added: list[Symbol] = []
    for module in sorted(reached):
        source = module_file(trees[0], module)
        for name in sorted(used & _defined_names(source, module, trees[0]) if source else ()):
            key = f"{module}:{name}"
            if key not in known:
                usage = "replaces" if name in set_names else "calls" if name in called else "reads"
                added.append(Symbol(key, usage, ("by name",), not all(defined(t, key) for t in trees)))
                known.add(key)
    for key in sorted(_config_fields(trees[0]).get_all(used)):
        if key not in known:
            added.append(Symbol(key, "reads", ("by name",), not all(defined(t, key) for t in trees)))
            known.add(key)
    for index, symbol in enumerate(found.symbols):
        if symbol.usage in ("reads", "calls") and symbol.key.partition(":")[2] in set_names:
            found.symbols[index] = Symbol(symbol.key, "replaces", symbol.places, symbol.optional)
    replaced = [s.key for s in [*found.symbols, *added] if s.usage == "replaces"]
    for key in replaced:
        for caller in callers_of(key, trees[0]):
            if caller not in known:
                added.append(Symbol(caller, "relies", (f"calls {key.partition(':')[2]}",)))
                known.add(caller)
    found.symbols += added


def _attribute_names(trees: Iterable[ast.Module]) -> tuple[set[str], set[str], set[str]]:
    """Attribute names the framework uses (``x.name``, ``getattr``/``hasattr``/``setattr`` of a literal or a module
    constant, and string literals that are names, as ``getattr(config, _flag_name())`` reads them), those it calls,
    and those it sets with ``setattr``: by a literal name, or, where a file sets attributes by computed names
    (``for name in targets: setattr(module, name, f)``), each private name it holds as a string. A sweep over
    ``sys.modules`` is read by its own rule (:data:`~harness.source.source_scan.SWEPT`), not by these names."""
    used: set[str] = set()
    called: set[str] = set()
    set_names: set[str] = set()
    for tree in trees:
        nodes = walked(tree)
        swept = {
            id(node)
            for loop in nodes
            if isinstance(loop, ast.For) and (module := swept_module(loop))
            for node in walked(loop)
            if isinstance(node, ast.Call) and node.args and getattr(node.args[0], "id", None) == module
        }
        strings = {
            node.value
            for node in nodes
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier()
        }
        used |= strings
        computed = any(
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "setattr"
            and len(node.args) >= 3
            and not isinstance(node.args[1], ast.Constant)
            for node in nodes
        )
        if computed:
            set_names |= {name for name in strings if name.startswith("_") and not name.startswith("__")}
        constants = {
            t.id: n.value.value
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for node in nodes:
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute):
                    called.add(node.func.attr)
                builtin = getattr(node.func, "id", None)
                if builtin in ("getattr", "hasattr", "setattr") and len(node.args) >= 2 and id(node) not in swept:
                    argument = node.args[1]
                    name = (
                        argument.value
                        if isinstance(argument, ast.Constant)
                        else constants.get(getattr(argument, "id", ""))
                    )
                    if isinstance(name, str):
                        used.add(name)
                        if builtin == "setattr":
                            set_names.add(name)
    return used, called, set_names


def _module_strings(trees: Iterable[ast.Module], megatron: tuple[Path, ...]) -> set[str]:
    """Megatron modules the framework names in string literals, e.g. ``"megatron.core.distributed.xyz"``."""
    return {
        node.value
        for tree in trees
        for node in walked(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and is_megatron(node.value)
        and any(module_file(t, node.value) for t in megatron)
    }


def _defined_names(source: Path, module: str, tree: Path) -> set[str]:
    """Names a Megatron module binds at module level to something other than a module: its functions, classes,
    globals and the functions it imports by name (distinctive ones: private, or with an underscore)."""
    names = set()
    for node in parsed_file(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                name = alias.asname or alias.name
                imported = _imported_module(source, module, name)
                if not (imported and module_file(tree, imported)):
                    names.add(name)
    return {name for name in names if "_" in name and len(name) > 3}


class _Fields(dict):
    """Field name -> the config classes that declare it."""

    def get_all(self, names: set[str]) -> set[str]:
        return {key for name in names if len(self.get(name, ())) <= 2 for key in self.get(name, ())}


@functools.cache
def _config_fields(tree: Path) -> _Fields:
    """The annotated fields of Megatron's ``*Config`` classes in ``megatron/core``, by field name: what a framework
    reads on a config object it was handed (``ddp_config.use_megatron_fsdp``)."""
    fields = _Fields()
    core = tree / "megatron" / "core"
    for path in sorted(core.rglob("*config*.py")):
        module = ".".join(path.relative_to(tree).with_suffix("").parts)
        for node in parsed_file(path).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and "_" in item.target.id:
                        fields.setdefault(item.target.id, []).append(f"{module}:{node.name}.{item.target.id}")
    return fields


def _symbols(
    scan: SourceScan,
    trees: tuple[Path, ...],
    replaced: dict[str, tuple[str | None, list[str]]],
    modules: dict[Path, str],
) -> list[Symbol]:
    places: dict[str, list[str]] = {}
    usages: dict[str, str] = {}
    for use in scan.uses:
        for path in use.paths:
            key = symbol_key(path, trees)
            if key is None:
                continue
            places.setdefault(key, []).append(f"{use.file}:{use.line}")
            usage = "calls" if path in scan.called else "reads"
            if usages.get(key) != "calls":
                usages[key] = usage
    symbols = []
    for key in sorted(set(places) | set(replaced)):
        optional = not all(defined(tree, key) for tree in trees)
        if key in replaced:
            replacement, where = replaced[key]
            symbols.append(Symbol(key, "replaces", tuple(where), optional, replacement))
            symbols += [
                Symbol(
                    caller, "relies", (f"calls {key.partition(':')[2]}",), not all(defined(t, caller) for t in trees)
                )
                for caller in callers_of(key, trees[0])
                if caller not in places and caller not in replaced
            ]
        else:
            symbols.append(Symbol(key, usages[key], tuple(dict.fromkeys(places[key])), optional))
    return list({symbol.key: symbol for symbol in symbols}.values())


def _place(assignment: Assignment) -> str:
    return f"{assignment.file.name}:{assignment.line}"


def _function_named(tree: ast.Module, value: str) -> str | None:
    """``value`` where it names a module-level function of ``tree``: the framework's replacement by its own name."""
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    return value if value in names else None


def symbol_key(path: str, trees: Iterable[Path]) -> str | None:
    """``module:qualname`` of a dotted Megatron path: the longest prefix that is a module in one of ``trees``, a module
    that module imports by name followed (``finalize_model_grads:parallel_state.f`` is ``parallel_state:f``);
    ``None`` for a module itself (its symbols are what a declaration names), and for a name outside Megatron's own
    packages (``megatron.bridge``), whatever else the trees hold."""
    if not is_megatron(path):
        return None
    trees = tuple(trees)
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = ".".join(parts[:cut])
        for tree in trees:
            source = module_file(tree, module)
            if source is None:
                continue
            imported = _imported_module(source, module, parts[cut]) if cut < len(parts) - 1 else None
            if imported and module_file(tree, imported):
                return symbol_key(".".join([imported, *parts[cut + 1 :]]), trees)
            return f"{module}:{'.'.join(parts[cut:])}"
    return None


def _imported_module(source: Path, module: str, name: str) -> str | None:
    """The module ``name`` is bound to in ``module``'s source by an import of it (``from .. import parallel_state``),
    or by a module-level alias of such a name (``mpu = parallel_state``), else ``None``."""
    package = module.split(".") if source.name == "__init__.py" else module.split(".")[:-1]
    for node in parsed_file(source).body:
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            origin = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return f"{origin}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name:
                    return alias.name
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id != name:
            if any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return _imported_module(source, module, node.value.id)
    return None


def module_file(tree: Path, module: str) -> Path | None:
    """The file of ``module`` below ``tree`` (a folder holding ``megatron/``), a package's ``__init__.py``."""
    base = tree.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def defined(tree: Path, key: str, on_objects: bool = True) -> bool:
    """Whether Megatron in ``tree`` defines ``key``: its module's source binds the qualname's first part at module
    level (a def, class, assignment or import, followed to where it is defined), and each further part is bound by
    what the part before is: a class's body, an attribute its methods set on ``self`` (``self.output_layer``), a
    Megatron base class's member (``Router.set_layer_number`` for ``TopKRouter``), or an attribute set on a
    function in its module (``f.warned = True``). A member of a base class outside Megatron is not known here.
    Without ``on_objects``, what only the objects hold (set on ``self``) is left out: the class itself lacks it."""
    module, _, qualname = key.partition(":")
    first, *rest = qualname.split(".")
    found = _defined_in(tree, module, first, 0)
    return found is not None and _has_members(tree, *found, rest, 0, on_objects)


def inherits_from_outside(tree: Path, key: str) -> bool:
    """Whether the class owning ``key`` (``module:Class.name``) derives, through Megatron's own classes, from a class
    outside Megatron's source (``torch.autograd.Function``, a Transformer Engine module): a member Megatron's
    source does not bind may still be the class's own there (``MTPLossAutoScaler.apply``)."""
    module, _, qualname = key.partition(":")
    owner = qualname.rpartition(".")[0]
    found = _defined_in(tree, module, owner, 0) if owner and "." not in owner else None
    return found is not None and isinstance(found[1], ast.ClassDef) and _outside_base(tree, *found, 0)


def _outside_base(tree: Path, module: str, cls: ast.ClassDef, depth: int) -> bool:
    for written, base_class in _bases(tree, module, cls, depth):
        if base_class is None:
            if written not in (None, "object", "ABC", "Generic", "Protocol", "Enum"):
                return True
        elif depth < _FOLLOWED and _outside_base(tree, *base_class, depth + 1):
            return True
    return False


def _bases(
    tree: Path, module: str, cls: ast.ClassDef, depth: int
) -> list[tuple[str | None, tuple[str, ast.ClassDef] | None]]:
    """Each base of ``cls`` as written, with the Megatron class it is (its module and definition), else ``None``."""
    found = []
    for base in cls.bases:
        written = dotted_name(base)
        defined_as = _defined_in(tree, module, written, depth + 1) if written and "." not in written else None
        found.append((written, defined_as if defined_as and isinstance(defined_as[1], ast.ClassDef) else None))
    return found


_FOLLOWED = 6
"""How many imports and base classes a lookup follows: re-exports and class hierarchies are shallow."""


def _defined_in(tree: Path, module: str, name: str, depth: int) -> tuple[str, ast.stmt] | None:
    """The module and statement defining ``name`` of ``module``, an import of it followed to its origin."""
    source = module_file(tree, module)
    if source is None or depth > _FOLLOWED or name not in _text(source):
        return None  # a file that never writes the name binds none: its tree need not be parsed
    node = _binding(parsed_file(source).body, name)
    if isinstance(node, ast.ImportFrom):
        origin = absolute_module(node, module, source.name == "__init__.py")
        alias = next(a for a in node.names if (a.asname or a.name) == name)
        if not is_megatron(origin) or module_file(tree, f"{origin}.{alias.name}") is not None:
            return module, node  # another library's name, or a submodule (``from megatron.core import parallel_state``)
        return _defined_in(tree, origin, alias.name, depth + 1)
    return (module, node) if node is not None else None


@functools.cache
def _attributes_set(scope: ast.AST) -> dict[tuple[str, str], ast.stmt]:
    """``(holder, attribute)`` -> the first statement below ``scope`` assigning ``holder.attribute``."""
    found: dict[tuple[str, str], ast.stmt] = {}
    for node in walked(scope):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    found.setdefault((target.value.id, target.attr), node)
    return found


def _has_members(tree: Path, module: str, node: ast.stmt, parts: list[str], depth: int, on_objects: bool) -> bool:
    if not parts:
        return True
    if depth > _FOLLOWED:
        return False
    part, rest = parts[0], parts[1:]
    if isinstance(node, ast.ClassDef):
        member = _class_member(tree, module, node, part, depth, on_objects)
        return member is not None and _has_members(tree, *member, rest, depth + 1, on_objects)
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not rest:
        source = module_file(tree, module)
        return source is not None and (node.name, part) in _attributes_set(parsed_file(source))
    return False


def _class_member(
    tree: Path, module: str, cls: ast.ClassDef, name: str, depth: int, on_objects: bool = True
) -> tuple[str, ast.stmt] | None:
    """Where ``cls`` (of ``module``) binds ``name``: its body, ``self.name = ...`` in its methods, ``Cls.name = ...``
    anywhere in its module (a flag Megatron sets itself), or a base class Megatron defines, followed."""
    found = _binding(cls.body, name)
    if found is not None:
        return module, found
    source = module_file(tree, module)
    methods = [n for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    places = (
        [(method, "self") for method in methods if on_objects] + [(parsed_file(source), cls.name)] if source else []
    )
    for place, holder in places:
        node = _attributes_set(place).get((holder, name))
        if node is not None:
            return module, node
    for _, base_class in _bases(tree, module, cls, depth):
        if base_class is not None and depth < _FOLLOWED:
            member = _class_member(tree, *base_class, name, depth + 1, on_objects)
            if member is not None:
                return member
    return None


def _binding(body: list[ast.stmt], name: str) -> ast.stmt | None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return node
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return node
        if isinstance(node, ast.Import | ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return node
        if isinstance(node, ast.If | ast.Try):
            inner = [
                *node.body,
                *getattr(node, "orelse", []),
                *(s for h in getattr(node, "handlers", []) for s in h.body),
            ]
            found = _binding(inner, name)
            if found is not None:
                return found
    return None


def holders_of(key: str | None, trees: Sequence[Path]) -> list[str]:
    """Where a sweep by identity re-binds a module-level function ``key`` names through a package re-exporting it
    (``megatron.core.dist_checkpointing:save``): the module defining it on each release, and every module holding it
    by value on the reference release (the first of ``trees``)."""
    module, _, name = key.partition(":") if key else ("", "", "")
    if not name or "." in name:
        return []
    found: set[str] = set()
    for index, tree in enumerate(trees):
        defined = _defining(tree, module, name)
        if defined is not None and defined != (module, name):
            there = f"{defined[0]}:{defined[1]}"
            found.add(there)
            if index == 0:  # the holders by value, read on the reference release
                held = megatron_source(tree).held_by_value(there)
                found.update(f"{other}:{alias}" for other, alias in held if alias == defined[1])
    return sorted(found - {key})


def _defining(tree: Path, module: str, name: str) -> tuple[str, str] | None:
    """``(module, name)`` where the function ``module`` binds as ``name`` is defined, followed through re-exports."""
    for _ in range(4):
        source = module_file(tree, module)
        if source is not None and name not in import_words(_text(source)):
            return module, name  # defined there, or bound otherwise than by an import
        imported = _imported_module(source, module, name) if source is not None else None
        if imported is None:
            return module, name
        module, _, name = imported.rpartition(".")
        if module_file(tree, module) is None:
            return None
    return None


def swept_keys(name: str, trees: Sequence[Path]) -> list[str]:
    """The Megatron modules a sweep over ``sys.modules`` re-binds ``name`` in: those holding a module-level function
    of that name by value from the Megatron module defining it (``from ...multi_token_prediction import
    process_mtp_loss`` in ``gpt_model``), in any release read. The defining module itself is what the framework's
    own assignment there names."""
    found: set[str] = set()
    for tree in trees:
        source = megatron_source(tree)
        for module, (_, text) in source.texts.items():
            if f"def {name}(" in text and defined(tree, f"{module}:{name}"):
                found.update(
                    f"{other}:{name}" for other, alias in source.held_by_value(f"{module}:{name}") if alias == name
                )
    return sorted(found)


@functools.cache
def megatron_source(tree: Path) -> MegatronSource:
    """One release's source read once per process, shared by every reading of it (sweeps, the patch reader)."""
    return MegatronSource(tree)


def callers_of(key: str, tree: Path) -> list[str]:
    """The module-level functions of ``key``'s Megatron module that call its name: where Megatron's own calls reach
    a replacement of it."""
    module, _, qualname = key.partition(":")
    source = module_file(tree, module)
    if source is None or "." in qualname:
        return []
    return [f"{module}:{caller}" for caller in _called_by(source).get(qualname, ()) if caller != qualname]


@functools.cache
def _called_by(source: Path) -> dict[str, tuple[str, ...]]:
    """Name -> the module-level functions of a Megatron file that call it by that plain name, in order."""
    found: dict[str, list[str]] = {}
    for node in parsed_file(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = {c.func.id for c in walked(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            for name in names:
                found.setdefault(name, []).append(node.name)
    return {name: tuple(callers) for name, callers in found.items()}
