"""The fingerprint of a Megatron symbol in the running interpreter, made with ``inspect`` and ``ast``.

For each ``module:qualname``: whether it exists, its kind, defining module, every parameter (name, kind, default,
annotation), dataclass fields with their defaults, and a hash of the function body normalised through the AST
(docstrings, comments and whitespace do not count), so a changed body shows up even when the signature did not
change. For a function it also records what the body does, so a diff can say how it changed: the module-level
functions it calls, in order, with same-module callees classified as coalesced reductions or not
(:func:`_function_calls`), and the model-config attributes it reads (:func:`_config_reads`).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.source.source_scan import attribute_chain

_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")
_REPR_LIMIT = 200
_FLATTENS = frozenset({"_flatten_dense_tensors", "flatten_dense_tensors"})
_ALL_REDUCES = frozenset(
    {"all_reduce", "all_reduce_coalesced", "allreduce", "allreduce_coalesced", "all_reduce_multigpu"}
)
_CONCATENATIONS = ("torch.cat", "torch.concat", "torch.concatenate")
_CONFIG = "config"
_CONFIG_GETTER = "get_model_config"


def fingerprint_symbols(symbols: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The fingerprint of each ``module:qualname`` in the running interpreter (imports the modules)."""
    return {symbol: _fingerprint_symbol(symbol) for symbol in symbols}


def _fingerprint_symbol(symbol: str) -> dict[str, Any]:
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
    return {"exists": True, **_describe(obj)}


def _describe(obj: Any) -> dict[str, Any]:
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
            "body": _body_text(obj),
            "calls": _function_calls(obj),
            "config_reads": _config_reads(obj),
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


def _body_text(func: Any) -> str | None:
    """The function's source as written (decorators included, dedented), for the diff of a changed body; None where
    there is none."""
    try:
        return textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError):
        return None


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


def _function_calls(func: Any) -> list[dict[str, Any]] | None:
    """The module-level functions ``func`` calls, in source order, each resolved through its module's globals.

    A changed body hash says only that something changed; the callees say what: a reduction upstream added after
    the call an adapter patches runs outside the adapter's replacement. Each call records the callee as written
    (``name``), its line counted from the first line of the function's source (0), so moving the function in its
    file changes nothing, the object it resolves to (``target``, ``module:qualname``; for a function-local import,
    the imported name) and, for a callee defined in the same module, ``coalesced_reduction``: whether its own body
    flattens tensors into one buffer and all-reduces it (:func:`_coalesces`); ``None`` for other callees. Calls
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
        name = attribute_chain(node.func)
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
            verdict = classified.setdefault(target, _coalesces(callee))
        calls.append({**record, "target": target, "coalesced_reduction": verdict})
    return calls


def _coalesces(func: Any) -> bool:
    """Whether ``func``'s own body flattens tensors into one buffer and calls an all-reduce.

    That is the pattern whose peak memory is one buffer the size of everything reduced: an adapter that chunks
    one such reduction to bound memory leaves every other one as it is. Flattening is ``_flatten_dense_tensors``
    or ``torch.cat`` of something named like a gradient; an all-reduce is a call of ``all_reduce``,
    ``all_reduce_coalesced`` or a spelling of them (:data:`_ALL_REDUCES`), through any path.
    """
    definition = _definition(func)
    if definition is None:
        return False
    flattens = reduces = False
    for node in _nodes(definition, ast.Call):
        name = attribute_chain(node.func) or ""
        last = name.rsplit(".", 1)[-1]
        if last in _FLATTENS or (name in _CONCATENATIONS and any(_names_grad(arg) for arg in node.args)):
            flattens = True
        reduces = reduces or last in _ALL_REDUCES
    return flattens and reduces


def _config_reads(func: Any) -> list[str] | None:
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
        if isinstance(value, ast.Call) and (attribute_chain(value.func) or "").rsplit(".", 1)[-1] == _CONFIG_GETTER:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))

    def is_config(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id in names) or attribute_chain(node) == f"self.{_CONFIG}"

    reads: set[str] = set()
    for node in ast.walk(definition):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and is_config(node.value):
            reads.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and attribute_chain(node.func) in ("getattr", "hasattr")
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
