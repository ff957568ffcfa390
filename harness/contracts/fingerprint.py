"""Fingerprints of the Megatron symbols a subject declares, and the checks the api-fingerprint contract makes.

Downstream adapters lean on Megatron's *private* names (``_allreduce_non_tensor_model_parallel_grads``,
``_get_main_grad_attr``) and on dataclass fields read by name (the FSDP flag on ``DistributedDataParallelConfig``).
Public-API checkers skip exactly those: they stop at underscore names and never see a field read through ``getattr``.
So the subject names every Megatron symbol it touches in ``MEGATRON_SYMBOLS``, and the gate fingerprints each one
with ``inspect`` and ``ast`` inside the target's venv: whether it exists, its kind, defining module, every
parameter (name, kind, default, annotation), dataclass fields with their defaults, and a hash of the function body
normalised through the AST (docstrings, comments and whitespace do not count), so a changed body shows up even when
the signature did not change. For a function it also records what the body does, so a diff can say how it changed:
the module-level functions it calls, in order, with same-module callees classified as coalesced reductions or not
(:func:`function_calls`), and the model-config attributes it reads (:func:`config_reads`).

Declaration format (``MEGATRON_SYMBOLS`` in the subject module)::

    {
        "<module>:<qualname>": "<usage>",                       # usage: imports, calls, reads, relies
        "<module>:<qualname>": "replaces with <subject name>",  # the subject's drop-in replacement of it
        "<module>:<qualname>": "calls, optional",               # may be absent on a target
        "<module>:<a> | <module>:<b>": "reads",                 # alternatives: one must exist, the first present wins
    }

``relies`` names upstream code the subject depends on without calling it (``finalize_model_grads`` looks the replaced
name up at call time). The declaration is checked against the subject's source: every ``megatron`` import, module
named to ``importlib.import_module`` (also through a string constant or a helper returning the module), attribute or
``getattr`` on such a module must be covered by a declared symbol (see :func:`scan_sources` for what is followed).

``python -m harness.contracts.fingerprint`` writes the fingerprint of a subject's declared symbols from inside a
target venv, cached per installed Megatron under ``reports/.fingerprints/<session>-<key>.json`` (see
:func:`install_key`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import re
import sys
import tempfile
import textwrap
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.plugin.subjects import SubjectError, load_subject
from harness.targets.installed_versions import installed_versions, megatron_origin

DECLARATION_NAME = "MEGATRON_SYMBOLS"
USAGES = ("imports", "calls", "reads", "replaces", "relies")
MEGATRON_ROOT = "megatron"
DISTRIBUTION = "megatron-core"
HARNESS_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_SYMBOL = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
_USAGE = re.compile(r"^(?P<usage>[a-z]+)(?: with (?P<replacement>[A-Za-z_]\w*))?(?P<optional>, optional)?$")
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")
_REPR_LIMIT = 200
_POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
_ATTRIBUTE_BUILTINS = ("hasattr", "setattr", "delattr")
FLATTENS = frozenset({"_flatten_dense_tensors", "flatten_dense_tensors"})
ALL_REDUCES = frozenset(
    {"all_reduce", "all_reduce_coalesced", "allreduce", "allreduce_coalesced", "all_reduce_multigpu"}
)
_CONCATENATIONS = ("torch.cat", "torch.concat", "torch.concatenate")
_CONFIG = "config"
_CONFIG_GETTER = "get_model_config"


class DeclarationError(ValueError):
    """A ``MEGATRON_SYMBOLS`` that cannot be used; the message names the entry."""


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declaration entry: a symbol, or alternatives of which one must exist (the first present is the one used)."""

    key: str
    members: tuple[str, ...]
    usage: str
    optional: bool = False
    replacement: str | None = None


def parse_declaration(raw: object) -> list[Declared]:
    """Validate a ``MEGATRON_SYMBOLS`` mapping; raise :class:`DeclarationError` on the first bad entry."""
    if not isinstance(raw, dict) or not raw:
        raise DeclarationError(f"{DECLARATION_NAME} must be a non-empty dict of symbol -> usage, got {raw!r:.80}")
    entries: list[Declared] = []
    owner: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise DeclarationError(f"{DECLARATION_NAME}[{key!r}]: keys and values must be strings")
        members = tuple(member.strip() for member in key.split("|"))
        for member in members:
            if not _SYMBOL.match(member):
                raise DeclarationError(f"{DECLARATION_NAME}[{key!r}]: {member!r} is not of the form module:qualname")
            if member in owner:
                raise DeclarationError(
                    f"{DECLARATION_NAME}[{key!r}]: {member} is already declared by {owner[member]!r}"
                )
            owner[member] = key
        match = _USAGE.match(value.strip())
        if not match or match["usage"] not in USAGES:
            raise DeclarationError(
                f"{DECLARATION_NAME}[{key!r}] = {value!r}: expected one of {', '.join(USAGES)}, "
                "'replaces with <subject name>', optionally followed by ', optional'"
            )
        if (match["usage"] == "replaces") != (match["replacement"] is not None):
            raise DeclarationError(
                f"{DECLARATION_NAME}[{key!r}] = {value!r}: 'with <subject name>' goes with 'replaces' and only there"
            )
        entries.append(Declared(key, members, match["usage"], bool(match["optional"]), match["replacement"]))
    return entries


def read_declaration(subject: ModuleType) -> list[Declared]:
    """The subject's parsed ``MEGATRON_SYMBOLS``; a :class:`DeclarationError` when it has none or a bad one."""
    if not hasattr(subject, DECLARATION_NAME):
        raise DeclarationError(
            f"subject {subject.__name__!r} declares no {DECLARATION_NAME}: name every Megatron symbol it imports, "
            "calls, replaces or reads (format: harness/contracts/fingerprint.py)"
        )
    return parse_declaration(getattr(subject, DECLARATION_NAME))


def declared_symbols(declaration: Iterable[Declared]) -> list[str]:
    """Every declared symbol, alternatives included, in declaration order."""
    return [member for entry in declaration for member in entry.members]


def dotted(symbol: str) -> str:
    """``module:qualname`` as one dotted path, the form source uses are compared in."""
    return symbol.replace(":", ".")


# --- the subject's source ---------------------------------------------------------------------------------------


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

    def describe(self) -> str:
        """The shape and place, e.g. ``(2 positional) at allreduce.py:108``."""
        keywords = f", keywords {', '.join(self.keywords)}" if self.keywords else ""
        return f"({self.positional} positional{keywords}) at {self.file}:{self.line}"


@dataclasses.dataclass(frozen=True)
class SourceScan:
    """What the subject's files reach in Megatron."""

    uses: tuple[Use, ...]
    calls: tuple[CallSite, ...]


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


def scan_sources(files: Iterable[Path]) -> SourceScan:
    """Every use of Megatron in ``files``, and every call of a Megatron function with its shape.

    Followed: ``import``/``from ... import`` of ``megatron``; ``importlib.import_module``, ``__import__`` and
    ``sys.modules[...]`` with a string literal or a module-level string constant; names bound to such modules (also
    through helper functions that return them, and across files); attribute chains on them, read or assigned;
    ``getattr``, ``hasattr``, ``setattr`` and ``delattr`` with a literal name or a module-level string constant.
    Binding is by name and flow-insensitive: a name counts as a Megatron alias only when every binding of it in the
    files binds Megatron, and a function parameter of that name is taken to be the same object. Not followed:
    attribute names computed at run time (``getattr(module, name)`` over a loop variable).
    """
    trees = {path: ast.parse(path.read_text(), str(path)) for path in files}
    resolver = _Resolver(_string_constants(trees.values()))
    for _ in range(10):
        aliases, returns = _bindings(trees.values(), resolver)
        if (aliases, returns) == (resolver.aliases, resolver.returns):
            break
        resolver.aliases, resolver.returns = aliases, returns
    uses: list[Use] = []
    calls: list[CallSite] = []
    for path, tree in trees.items():
        collector = _Collector(resolver, path.name)
        collector.visit(tree)
        uses += collector.uses
        calls += collector.calls
    return SourceScan(tuple(uses), tuple(calls))


def undeclared_uses(scan: SourceScan, declaration: Iterable[Declared]) -> list[Use]:
    """Uses not covered by a declared symbol: the symbol itself, or a module or class holding a declared one."""
    declared = [dotted(member) for member in declared_symbols(declaration)]

    def covered(path: str) -> bool:
        return any(d == path or d.startswith(path + ".") for d in declared)

    return [use for use in scan.uses if not any(covered(path) for path in use.paths)]


def _string_constants(trees: Iterable[ast.Module]) -> dict[str, str]:
    """Module-level ``NAME = "..."`` of all files; a name given different values in two files is left out."""
    values: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                values.setdefault(node.targets[0].id, set()).add(node.value.value)
    return {name: found.pop() for name, found in values.items() if len(found) == 1}


def _under_megatron(path: str) -> bool:
    return path == MEGATRON_ROOT or path.startswith(MEGATRON_ROOT + ".")


class _Resolver:
    """Which Megatron paths an expression denotes, given the names bound so far."""

    def __init__(self, constants: dict[str, str]) -> None:
        self.constants = constants
        self.aliases: dict[str, frozenset[str]] = {}
        self.returns: dict[str, frozenset[str]] = {}

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
            return self.aliases.get(node.id, frozenset())
        if isinstance(node, ast.Attribute):
            if node.attr.startswith("__"):
                return frozenset()
            return frozenset(f"{base}.{node.attr}" for base in self.paths(node.value))
        if isinstance(node, ast.Subscript) and _source(node.value) == "sys.modules":
            return self.module_named(node.slice)
        if isinstance(node, ast.Call):
            return self._call_paths(node)
        return frozenset()

    def _call_paths(self, node: ast.Call) -> frozenset[str]:
        callee = _source(node.func)
        if callee in ("importlib.import_module", "import_module", "__import__") and node.args:
            return self.module_named(node.args[0])
        if callee == "getattr" and len(node.args) >= 2:
            attr = self.string(node.args[1])
            return frozenset(f"{base}.{attr}" for base in self.paths(node.args[0])) if attr else frozenset()
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        return self.returns.get(name, frozenset()) if name else frozenset()


def _source(node: ast.expr) -> str | None:
    """``a.b.c`` for a plain name or attribute chain, else ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _source(node.value)
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
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        bind(alias.asname, [alias.name] if _under_megatron(alias.name) else [])
                    else:
                        top = alias.name.split(".")[0]
                        bind(top, [top] if top == MEGATRON_ROOT else [])
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
                for ret in _own_returns(node):
                    paths = resolver.paths(ret.value) if ret.value is not None else frozenset()
                    if paths:
                        returned.setdefault(node.name, set()).update(paths)
                    else:
                        opaque.add(node.name)
    aliases = {name: frozenset(paths) for name, paths in bound.items() if name not in tainted}
    returns = {name: frozenset(paths) for name, paths in returned.items() if name not in opaque}
    return aliases, returns


def _own_returns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.Return]:
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

    def __init__(self, resolver: _Resolver, file: str) -> None:
        self.resolver = resolver
        self.file = file
        self.uses: list[Use] = []
        self.calls: list[CallSite] = []

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
        callee = _source(node.func)
        if callee in _ATTRIBUTE_BUILTINS and len(node.args) >= 2:
            attr = self.resolver.string(node.args[1])
            if attr:
                self._use((f"{base}.{attr}" for base in self.resolver.paths(node.args[0])), node)
        shapeless = any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords)
        if not shapeless:
            keywords = tuple(k.arg for k in node.keywords if k.arg)
            for path in sorted(self.resolver.paths(node.func)):
                self.calls.append(CallSite(path, len(node.args), keywords, self.file, node.lineno))
        self.generic_visit(node)


# --- fingerprints -----------------------------------------------------------------------------------------------


def fingerprint_symbols(symbols: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The fingerprint of each ``module:qualname`` in the running interpreter (imports the modules)."""
    return {symbol: fingerprint_symbol(symbol) for symbol in symbols}


def fingerprint_symbol(symbol: str) -> dict[str, Any]:
    """Whether ``symbol`` exists here and, if so, its kind, defining module and shape (see the module docstring)."""
    module_name, qualname = symbol.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        return {"exists": False, "missing": f"module {module_name} cannot be imported: {err}"}
    parts = qualname.split(".")
    for index, part in enumerate(parts):
        owner = ".".join([module_name, *parts[:index]])
        if index == len(parts) - 1 and inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            field = next((f for f in dataclasses.fields(obj) if f.name == part), None)
            if field is not None:
                return {"exists": True, "kind": "dataclass-field", "module": obj.__module__, **_field(field)}
        if not hasattr(obj, part):
            return {"exists": False, "missing": f"{owner} has no attribute {part!r}"}
        obj = getattr(obj, part)
    return {"exists": True, **describe(obj)}


def describe(obj: Any) -> dict[str, Any]:
    """Kind, defining module and shape of a live object."""
    if inspect.ismodule(obj):
        return {"kind": "module", "module": obj.__name__}
    if inspect.isclass(obj):
        record: dict[str, Any] = {"module": obj.__module__, "qualname": obj.__qualname__}
        if dataclasses.is_dataclass(obj):
            return {"kind": "dataclass", **record, "fields": [_field(f) for f in dataclasses.fields(obj)]}
        return {"kind": "class", **record, "parameters": parameters(obj)}
    if inspect.isroutine(obj):
        return {
            "kind": "function",
            "module": getattr(obj, "__module__", None),
            "qualname": getattr(obj, "__qualname__", None),
            "parameters": parameters(obj),
            "body_hash": body_hash(obj),
            "calls": function_calls(obj),
            "config_reads": config_reads(obj),
            "source": _source_location(obj),
        }
    return {"kind": "value", "type": type(obj).__qualname__, "value": _repr(obj)}


def parameters(func: Any) -> list[dict[str, str | None]] | None:
    """Each parameter's name, kind, default (``repr``; ``None`` when it has none) and annotation."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    return [
        {
            "name": p.name,
            "kind": p.kind.name,
            "default": None if p.default is inspect.Parameter.empty else _repr(p.default),
            "annotation": None if p.annotation is inspect.Parameter.empty else _annotation(p.annotation),
        }
        for p in signature.parameters.values()
    ]


def body_hash(func: Any) -> str | None:
    """Hash of the function's decorators and body as ``ast.dump`` (no positions), without any docstring.

    Comments and whitespace never reach the AST, so only a change of what the code does moves the hash. ``None``
    when the source is not available (builtins, generated code) or does not parse on its own (a lambda inside an
    expression).
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                del body[0]
    definition = tree.body[0]
    parts = [*getattr(definition, "decorator_list", []), *getattr(definition, "body", [definition])]
    return hashlib.sha256("\n".join(ast.dump(part) for part in parts).encode()).hexdigest()[:16]


def function_calls(func: Any) -> list[dict[str, Any]] | None:
    """The module-level functions ``func`` calls, in source order, each resolved through its module's globals.

    A changed body hash says only that something changed; the callees say what: a reduction upstream added after
    the call an adapter patches runs outside the adapter's replacement. Each call records the callee as written
    (``name``), its line counted from the first line of the function's source (0), so moving the function in its
    file changes nothing, the object it resolves to (``target``, ``module:qualname``; for a function-local import,
    the imported name) and, for a callee defined in the same module, ``coalesced_reduction``: whether its own body
    flattens tensors into one buffer and all-reduces it (:func:`coalesces`); ``None`` for other callees. Calls
    through locals, parameters, attributes of objects and builtins are left out. ``None`` without source.
    """
    definition = _definition(func)
    if definition is None:
        return None
    func = inspect.unwrap(func)
    module_name = str(getattr(func, "__module__", "") or "")
    namespace = getattr(func, "__globals__", None)
    if namespace is None:
        namespace = vars(sys.modules[module_name]) if module_name in sys.modules else {}
    imported = _local_imports(definition, module_name)
    local = _local_names(definition) - imported.keys()
    classified: dict[str, bool] = {}
    calls: list[dict[str, Any]] = []
    for node in sorted(_nodes(definition, ast.Call), key=lambda call: (call.lineno, call.col_offset)):
        name = _source(node.func)
        if name is None:
            continue
        root, *rest = name.split(".")
        record: dict[str, Any] = {"name": name, "line": node.lineno - 1}
        if root in imported:
            module, path = imported[root]
            joined = ".".join([*path, *rest])
            if not joined:
                continue
            calls.append({**record, "target": f"{module}:{joined}", "coalesced_reduction": None})
            continue
        if root in local or root not in namespace:
            continue
        callee = _lookup(namespace[root], rest)
        if callee is None or not inspect.isroutine(callee):
            continue
        target = f"{getattr(callee, '__module__', None)}:{getattr(callee, '__qualname__', name)}"
        verdict = None
        if getattr(callee, "__module__", None) == module_name and inspect.isfunction(inspect.unwrap(callee)):
            verdict = classified.setdefault(target, coalesces(callee))
        calls.append({**record, "target": target, "coalesced_reduction": verdict})
    return calls


def coalesces(func: Any) -> bool:
    """Whether ``func``'s own body flattens tensors into one buffer and calls an all-reduce.

    That is the pattern whose peak memory is one buffer the size of everything reduced: an adapter that chunks
    one such reduction to bound memory leaves every other one as it is. Flattening is ``_flatten_dense_tensors``
    or ``torch.cat`` of something named like a gradient; an all-reduce is a call of ``all_reduce``,
    ``all_reduce_coalesced`` or a spelling of them (:data:`ALL_REDUCES`), through any path.
    """
    definition = _definition(func)
    if definition is None:
        return False
    flattens = reduces = False
    for node in _nodes(definition, ast.Call):
        name = _source(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if last in FLATTENS or (name in _CONCATENATIONS and any(_names_grad(arg) for arg in node.args)):
            flattens = True
        reduces = reduces or last in ALL_REDUCES
    return flattens and reduces


def config_reads(func: Any) -> list[str] | None:
    """The attributes ``func`` reads from the model config, sorted; ``None`` without source.

    An adapter hands upstream a config it builds or patches, and replaces functions that upstream calls with that
    config: an attribute upstream starts reading is a flag the adapter's config must carry and its replacement may
    have to honour. The config is a parameter named ``config``, a local bound from ``get_model_config(...)``, or
    ``self.config``; a read is an attribute load on it or ``getattr``/``hasattr`` of it with a literal name.
    """
    definition = _definition(func)
    if definition is None:
        return None
    arguments = definition.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs] if a.arg == _CONFIG}
    for node in _nodes(definition, ast.Assign, ast.AnnAssign):
        value = node.value
        if isinstance(value, ast.Call) and (_source(value.func) or "").rsplit(".", 1)[-1] == _CONFIG_GETTER:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))

    def is_config(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id in names) or _source(node) == f"self.{_CONFIG}"

    reads: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and is_config(node.value):
            reads.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and _source(node.func) in ("getattr", "hasattr")
            and len(node.args) >= 2
            and is_config(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            reads.add(node.args[1].value)
    return sorted(reads)


def _definition(func: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The parsed ``def`` of ``func``; line 1 is the first line of its source (a decorator or the ``def``)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None
    definition = tree.body[0] if tree.body else None
    return definition if isinstance(definition, ast.FunctionDef | ast.AsyncFunctionDef) else None


def _nodes(tree: ast.AST, *kinds: type) -> list[Any]:
    return [node for node in ast.walk(tree) if isinstance(node, kinds)]


def _local_imports(definition: ast.AST, module_name: str) -> dict[str, tuple[str, list[str]]]:
    """Names imported inside the function: name -> (module, attribute path below it); relative ones resolved."""
    package = module_name.rpartition(".")[0]
    module = sys.modules.get(module_name)
    if module is not None and getattr(module, "__package__", None) is not None:
        package = module.__package__ or ""
    found: dict[str, tuple[str, list[str]]] = {}
    for node in _nodes(definition, ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                found[alias.asname or top] = (alias.name if alias.asname else top, [])
            continue
        try:
            source = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
        except (ImportError, ValueError):
            continue
        for alias in node.names:
            if alias.name != "*":
                found[alias.asname or alias.name] = (source, [alias.name])
    return found


def _local_names(definition: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names the function binds itself (parameters, assignments, loop targets, nested definitions): they shadow
    the module's globals."""
    names: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node is not definition:
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def _lookup(obj: Any, path: list[str]) -> Any:
    """``obj.<path>``, or ``None`` where an attribute is missing or raises."""
    for part in path:
        try:
            obj = getattr(obj, part)
        except Exception:
            return None
    return obj


def _names_grad(node: ast.AST) -> bool:
    return any(
        "grad" in (sub.id if isinstance(sub, ast.Name) else sub.attr)
        for sub in ast.walk(node)
        if isinstance(sub, ast.Name | ast.Attribute)
    )


def signature_text(params: list[dict[str, str | None]] | None) -> str:
    """``(model, config, tp_group=None)``: a signature without annotations, from fingerprint parameters."""
    if params is None:
        return "(signature not available)"
    parts: list[str] = []
    for index, p in enumerate(params):
        kind = p["kind"]
        if kind == "KEYWORD_ONLY" and not any(q["kind"] in ("VAR_POSITIONAL", "KEYWORD_ONLY") for q in params[:index]):
            parts.append("*")
        name = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(str(kind), "") + str(p["name"])
        parts.append(name if p["default"] is None else f"{name}={p['default']}")
        if kind == "POSITIONAL_ONLY" and (index + 1 == len(params) or params[index + 1]["kind"] != "POSITIONAL_ONLY"):
            parts.append("/")
    return f"({', '.join(parts)})"


def _field(field: dataclasses.Field) -> dict[str, str | None]:
    if field.default is not dataclasses.MISSING:
        default: str | None = _repr(field.default)
    elif field.default_factory is not dataclasses.MISSING:
        default = f"factory {getattr(field.default_factory, '__qualname__', _repr(field.default_factory))}"
    else:
        default = None
    return {"name": field.name, "type": _annotation(field.type), "default": default}


def _annotation(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    return _ADDRESS.sub("", text)


def _repr(value: Any) -> str:
    """``repr`` without memory addresses (they differ between processes), cut to a readable length."""
    text = _ADDRESS.sub("", repr(value))
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _source_location(func: Any) -> str | None:
    """``megatron/core/.../file.py:LINE``, relative to the directory holding the top-level package."""
    try:
        file = Path(inspect.getsourcefile(func) or "")
        line = inspect.getsourcelines(func)[1]
    except (OSError, TypeError):
        return None
    depth = len(str(getattr(func, "__module__", "") or "").split(".")) + (file.name == "__init__.py")
    return f"{'/'.join(file.parts[-depth:])}:{line}"


# --- checks of the api-fingerprint contract ---------------------------------------------------------------------


def missing_symbols(declaration: Iterable[Declared], fingerprints: dict[str, dict[str, Any]]) -> list[str]:
    """One line per non-optional entry none of whose members exists."""
    problems = []
    for entry in declaration:
        if entry.optional or any(fingerprints[m]["exists"] for m in entry.members):
            continue
        reasons = "; ".join(f"{m}: {fingerprints[m]['missing']}" for m in entry.members)
        what = entry.members[0] if len(entry.members) == 1 else f"none of the alternatives {entry.key}"
        problems.append(f"{what} ({entry.usage}) does not exist: {reasons}")
    return problems


def resolved_member(entry: Declared, fingerprints: dict[str, dict[str, Any]]) -> str | None:
    """The member of ``entry`` the subject uses on this target: the first one that exists."""
    return next((m for m in entry.members if fingerprints.get(m, {}).get("exists")), None)


def replacement_problems(upstream: list[dict[str, Any]], replacement: list[dict[str, Any]]) -> list[str]:
    """Ways a call that upstream's signature accepts would fail on the replacement.

    The replacement must take upstream's positional parameters under the same names in the same order (callers
    pass them either way), with a default wherever upstream has one (callers may omit them), upstream's
    keyword-only parameters by name, ``*args``/``**kwargs`` where upstream has them, and no required parameter of
    its own.
    """
    kinds = {p["kind"] for p in replacement}
    takes_args, takes_kwargs = "VAR_POSITIONAL" in kinds, "VAR_KEYWORD" in kinds
    rep_positional = [p for p in replacement if p["kind"] in _POSITIONAL]
    rep_named = {p["name"]: p for p in replacement if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")}
    up_positional = [p for p in upstream if p["kind"] in _POSITIONAL]
    problems: list[str] = []
    for index, up in enumerate(up_positional):
        where = f"upstream's parameter {index + 1} {up['name']!r}"
        rep = rep_positional[index] if index < len(rep_positional) else None
        if rep is None:
            if not takes_args:
                problems.append(f"{where} has no counterpart: the replacement takes {len(rep_positional)} positional")
            elif up["kind"] == "POSITIONAL_OR_KEYWORD" and up["name"] not in rep_named and not takes_kwargs:
                problems.append(f"{where} cannot be passed by keyword to the replacement")
            continue
        if up["kind"] == "POSITIONAL_OR_KEYWORD" and rep["name"] != up["name"]:
            problems.append(
                f"{where} is named {rep['name']!r} in the replacement (a caller passing {up['name']}= fails)"
            )
        elif up["kind"] == "POSITIONAL_OR_KEYWORD" and rep["kind"] == "POSITIONAL_ONLY":
            problems.append(f"{where} is positional-only in the replacement (a caller passing {up['name']}= fails)")
        if up["default"] is not None and rep["default"] is None:
            problems.append(f"{where} has a default ({up['default']}), the replacement requires it")
    for up in (p for p in upstream if p["kind"] == "KEYWORD_ONLY"):
        rep = rep_named.get(up["name"])
        if rep is None and not takes_kwargs:
            problems.append(f"upstream's keyword-only parameter {up['name']!r} is not accepted by the replacement")
        elif rep is not None and up["default"] is not None and rep["default"] is None:
            problems.append(f"upstream's {up['name']!r} has a default ({up['default']}), the replacement requires it")
    up_kinds = {p["kind"] for p in upstream}
    if "VAR_POSITIONAL" in up_kinds and not takes_args:
        problems.append("upstream takes *args, the replacement does not")
    if "VAR_KEYWORD" in up_kinds and not takes_kwargs:
        problems.append("upstream takes **kwargs, the replacement does not")
    upstream_names = {p["name"] for p in upstream}
    extra_positional = [p for p in rep_positional[len(up_positional) :] if p["name"] not in upstream_names]
    extra_keyword = [p for p in replacement if p["kind"] == "KEYWORD_ONLY" and p["name"] not in upstream_names]
    for rep in extra_positional + extra_keyword:
        if rep["default"] is None:
            problems.append(f"the replacement requires {rep['name']!r}, which upstream's callers do not pass")
    return problems


def unbound_calls(params: list[dict[str, Any]], calls: Iterable[CallSite]) -> list[tuple[CallSite, str]]:
    """Each call shape with the reason it does not bind to ``params``; empty when at least one shape binds.

    A subject that supports several releases calls a function in several shapes and picks one at run time (for
    example ``_get_main_grad_attr(param, flag)`` or ``_get_main_grad_attr(param)``), so one binding shape suffices.
    """
    signature = inspect.Signature(
        [
            inspect.Parameter(
                str(p["name"]),
                getattr(inspect.Parameter, str(p["kind"])),
                default=inspect.Parameter.empty if p["default"] is None else p["default"],
            )
            for p in params
        ]
    )
    failures: list[tuple[CallSite, str]] = []
    for call in calls:
        try:
            signature.bind(*range(call.positional), **dict.fromkeys(call.keywords))
        except TypeError as err:
            failures.append((call, str(err)))
        else:
            return []
    return failures


# --- the installed Megatron and the cache -----------------------------------------------------------------------


def install_key() -> str | None:
    """``<version>-<digest of the installed .py files>``; ``None`` when the distribution lists no Python files.

    The digest is over the files pip installed (from the distribution's RECORD), so an index install, a local
    wheel, a local tree or an edited site-packages of the same version never share a key.
    """
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    files = sorted((f for f in dist.files or [] if f.suffix == ".py"), key=str)
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(str(file).encode() + b"\0" + Path(str(file.locate())).read_bytes())
    return f"{dist.version}-{digest.hexdigest()[:12]}"


def cached_fingerprint(symbols: list[str], session: str, cache_dir: Path) -> dict[str, Any]:
    """Fingerprints of ``symbols`` on the running interpreter's Megatron, read from or added to the cache.

    The cache file of an install holds every symbol fingerprinted there so far and the digest of this module, so a
    change of how fingerprints are made invalidates it.
    """
    key = install_key()
    path = cache_dir / f"{session}-{key}.json" if key else None
    known: dict[str, Any] = {}
    if path is not None and path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("harness") == HARNESS_DIGEST:
            known = stored["symbols"]
    missing = [s for s in symbols if s not in known]
    known.update(fingerprint_symbols(missing))
    record = {
        "session": session,
        "key": key,
        "harness": HARNESS_DIGEST,
        "megatron_core": installed_versions()[DISTRIBUTION],
        "origin": megatron_origin(),
        "symbols": known,
    }
    if path is not None and missing:
        write_json(path, record)
    return {**record, "symbols": {s: known[s] for s in symbols}, "cached": not missing}


def write_json(path: Path, data: object) -> None:
    """Write atomically: two processes writing the same file never leave half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w") as stream:
        json.dump(data, stream, indent=2)
        stream.write("\n")
    os.replace(temporary, path)


def main(argv: list[str] | None = None) -> int:
    """Fingerprint a subject's declared symbols in this interpreter and write them to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m harness.contracts.fingerprint", description=main.__doc__)
    parser.add_argument("--session", required=True, help="target session this interpreter belongs to")
    parser.add_argument("--subject", required=True, help="subject module or path")
    parser.add_argument("--cache-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        declaration = read_declaration(load_subject(args.subject))
    except (DeclarationError, SubjectError) as err:
        print(f"target {args.session}: {err}", file=sys.stderr)
        return 2
    record = cached_fingerprint(declared_symbols(declaration), args.session, args.cache_dir)
    record["subject"] = args.subject
    record["declaration"] = [dataclasses.asdict(entry) for entry in declaration]
    write_json(args.out, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
