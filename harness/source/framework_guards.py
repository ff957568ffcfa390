"""Whether a framework's own checks let one of its patches be made on a target, read from its source.

Frameworks patch behind their own version checks (``if version.parse(megatron.core.__version__) < "0.16.2":``, an
early ``return`` when torch or Megatron is not the release a fix is for, ``try: from megatron... import f`` with the
patch in the ``except ImportError``). A patch such a check skips on a target is not a missing or failed patch there:
it is reported as not applied, naming the check. The conditions are read in the function that makes the assignment
(or the module body): the ``if`` blocks around it, the early exits before it, the ``try`` it sits in. What the
reading understands: Megatron's and torch's ``__version__`` (the target's), version parsing and comparison,
``hasattr`` and ``from megatron... import`` against Megatron's source, names assigned from those before the patch,
and the device the framework trains on (a CUDA machine: ``torch.cuda.is_available()`` true, an NPU check false). A
condition it cannot read leaves the patch applied, and the verdict says which check was taken so.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from harness.source.megatron_namespace import is_megatron
from harness.source.source_scan import own_returns
from harness.source.syntax import dotted_name

UNKNOWN = object()
"""A value the reading cannot decide."""

DEVICE_CALLS = {"is_available": True, "is_torch_npu_available": False, "is_npu_available": False}
"""Device checks, as on the CUDA machine a framework trains on (the name of the function called)."""

DEVICE_FLAGS = {"is_npu_available": False, "is_cuda_available": True, "is_torch_npu_available": False}
"""Module-level flags frameworks keep the same checks in (``is_npu_available = is_torch_npu_available()``)."""

HELPER_DEPTH = 12
"""How deep a check's calls of the framework's own helpers are followed (the depth of the expressions read)."""

VERSION_TEXT = re.compile(r"^v?\d+(\.\d+)+")


@dataclass(frozen=True)
class Guard:
    """What the framework's checks say about one patch on one target."""

    applied: bool
    place: str | None = None
    """``file:line`` of the check that skips it (or that could not be read)."""
    unread: bool = False
    """A check around the patch could not be read; the patch is taken as applied."""


@dataclass(frozen=True)
class Versions:
    """What the checks compare against: the target's releases, and which Megatron names exist there."""

    megatron: str
    torch: str
    defines: Callable[[str], bool]
    """Whether Megatron on the target defines a dotted path (a module, or a name in one)."""
    parameters: Callable[[str, bool], tuple[str, ...] | None] = lambda dotted, bound: None
    built: Callable[[str, str], bool] = lambda dotted, name: False
    """Whether built objects of the Megatron class a dotted path names have ``name`` (a method, or an attribute its
    constructor sets): what ``hasattr(obj, name)`` finds on an object the patch is made on."""
    """The parameter names of the Megatron function a dotted path names (``bound``: reached on an object, its first
    taken), what ``inspect.signature(...).parameters`` gives there; None where it names none."""


def release(text: str) -> tuple[int, ...]:
    """The release numbers of a version string (``2.13.0+cpu`` -> ``(2, 13, 0)``), for comparison."""
    numbers = re.match(r"\d+(?:\.\d+)*", text.strip().lstrip("v"))
    if numbers is None:
        return ()
    parts = [int(p) for p in numbers.group(0).split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


@dataclass(frozen=True)
class _Version:
    text: str

    def key(self) -> tuple[int, ...]:
        return release(self.text)


def guard_of(
    chain: tuple[ast.AST, ...],
    module_body: list[ast.stmt],
    place_of,
    names: dict[str, str],
    versions: Versions,
    objects: dict[str, str] | None = None,
) -> Guard:
    """The verdict of the checks around ``chain[-1]`` (the patch statement), ``chain[:-1]`` its enclosing
    definitions. ``place_of(node)`` words a node's place, ``names`` resolves a dotted name's first part, ``objects``
    says which Megatron class an expression holds (the object an instance patch binds on: ``hasattr(self, ...)``)."""
    body, reader = _reader_at(chain, module_body, names, versions, objects)
    unread_at = None
    for condition, wanted, node in _conditions(body, chain[-1]):
        value = reader.value(condition)
        if value is UNKNOWN:
            unread_at = unread_at or place_of(node)
            continue
        if bool(value) != wanted:
            return Guard(False, place_of(node))
    return Guard(True, unread_at, unread_at is not None)


def value_of(
    expression: ast.expr,
    chain: tuple[ast.AST, ...],
    module_body: list[ast.stmt],
    names: dict[str, str],
    versions: Versions,
    objects: dict[str, str] | None = None,
) -> object:
    """What ``expression``, written at ``chain[-1]`` (its enclosing definitions before it), holds on this target, as
    the checks around a patch are read (``"padding_mask" in signature(layer._get_embeddings).parameters``);
    :data:`UNKNOWN` where the reading cannot decide it."""
    return _reader_at(chain, module_body, names, versions, objects)[1].value(expression)


def _reader_at(
    chain: tuple[ast.AST, ...],
    module_body: list[ast.stmt],
    names: dict[str, str],
    versions: Versions,
    objects: dict[str, str] | None,
) -> tuple[list[ast.stmt], _Reader]:
    """The body ``chain[-1]`` is read in (its innermost function's, else the module's) and a reader of it there."""
    functions = [n for n in chain[:-1] if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    body = functions[-1].body if functions else module_body
    return body, _Reader(body, chain[-1], names, versions, module_body, objects)


def reached(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    statement: ast.stmt,
    names: dict[str, str],
    versions: Versions,
    attributes: dict[str, object],
) -> bool | None:
    """Whether ``statement`` of ``function`` runs, the attributes of ``self`` in ``attributes`` holding the values
    given (what the patching function set on the object); None where a condition on the way cannot be read."""
    reader = _Reader(function.body, statement, names, versions, [], attributes=attributes)
    for condition, wanted, _ in _conditions(function.body, statement):
        value = reader.value(condition)
        if value is UNKNOWN:
            return None
        if bool(value) != wanted:
            return False
    return True


def _conditions(body: list[ast.stmt], target: ast.stmt) -> list[tuple[ast.expr, bool, ast.stmt]]:
    """The conditions on the way to ``target`` in ``body``: (test, the value it must have, the statement)."""
    for index, node in enumerate(body):
        if node is target:
            return _exits(body[:index])
        inner = _path_inside(node, target)
        if inner is not None:
            return _exits(body[:index]) + inner
    return []


def _exits(before: list[ast.stmt]) -> list[tuple[ast.expr, bool, ast.stmt]]:
    """``if <test>: return`` (or raise, or ``continue`` in a loop) before the patch: the patch runs only where the
    test is false."""
    return [
        (node.test, False, node)
        for node in before
        if isinstance(node, ast.If)
        and node.body
        and isinstance(node.body[-1], ast.Return | ast.Raise | ast.Continue)
        and not node.orelse
    ]


def _contains(nodes: list[ast.stmt], target: ast.stmt) -> bool:
    return any(node is target or _path_inside(node, target) is not None for node in nodes)


def _path_inside(node: ast.stmt, target: ast.stmt) -> list[tuple[ast.expr, bool, ast.stmt]] | None:
    if isinstance(node, ast.If):
        if _contains(node.body, target):
            return [(node.test, True, node), *_conditions(node.body, target)]
        if _contains(node.orelse, target):
            return [(node.test, False, node), *_conditions(node.orelse, target)]
    elif isinstance(node, ast.Try):
        if _contains(node.body, target):
            imports = [_Import(s) for s in node.body if isinstance(s, ast.ImportFrom)]
            return [(i.test, True, node) for i in imports] + _conditions(node.body, target)
        for handler in node.handlers:
            if _contains(handler.body, target) and _catches_import_error(handler):
                imports = [_Import(s) for s in node.body if isinstance(s, ast.ImportFrom)]
                return [(ast.BoolOp(ast.And(), [i.test for i in imports]), False, node)] if imports else []
        for block in (node.orelse, node.finalbody):
            if _contains(block, target):
                return _conditions(block, target)
    elif isinstance(node, ast.With | ast.For | ast.While):
        if _contains(node.body, target):
            return _conditions(node.body, target)
    return None


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
    return handler.type is None or any(
        getattr(n, "id", None) in ("ImportError", "ModuleNotFoundError", "Exception") for n in names
    )


class _Import:
    """``from m import a, b`` as a test: true where every name imports."""

    def __init__(self, node: ast.ImportFrom) -> None:
        paths = [f"{node.module}.{alias.name}" for alias in node.names]
        self.test = ast.Call(ast.Name("__imports__"), [ast.Constant(p) for p in paths], [])


def _bindings(node: ast.AST) -> list[tuple[ast.expr, ast.expr | None]]:
    """What a statement binds and to what (``None``: a value the reading does not follow, a loop's item)."""
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, ast.AnnAssign | ast.NamedExpr):
        return [(node.target, node.value)]
    if isinstance(node, ast.AugAssign | ast.For | ast.AsyncFor | ast.comprehension):
        return [(node.target, None)]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [(item.optional_vars, None) for item in node.items if item.optional_vars is not None]
    return []


@dataclass(frozen=True)
class _Parameters:
    """A signature read from Megatron's source: its parameter names in order."""

    names: tuple[str, ...]


PRESENT = object()
"""What a name bound by an import that went through holds: not None."""


def _fallbacks(module: list[ast.stmt]) -> dict[str, ast.expr]:
    """Module-level names bound by an import or else to ``None`` (``try: from m import f`` / ``except ImportError:
    f = None``; ``if cond: from m import f`` / ``else: f = None``): name -> the test under which the import binds it."""
    found: dict[str, ast.expr] = {}
    for node in module:
        if isinstance(node, ast.Try):
            imports = [_Import(s).test for s in node.body if isinstance(s, ast.ImportFrom)]
            handlers = [s for h in node.handlers if _catches_import_error(h) for s in h.body]
            test = ast.BoolOp(ast.And(), imports) if imports else None
            branches = [(node.body, handlers, test)]
        elif isinstance(node, ast.If):
            branches = [(node.body, node.orelse, node.test)]
        else:
            continue
        for imported, fallback, test in branches:
            if test is None:
                continue
            bound = {a.asname or a.name for s in imported if isinstance(s, ast.ImportFrom) for a in s.names}
            # A class or function defined only where the test holds (``if HAVE_X: class Sub(Base): ...``).
            bound |= {s.name for s in imported if isinstance(s, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)}
            for statement in fallback:
                if (
                    isinstance(statement, ast.Assign)
                    and isinstance(statement.value, ast.Constant)
                    and statement.value.value is None
                ):
                    found.update({t.id: test for t in statement.targets if isinstance(t, ast.Name) and t.id in bound})
    return found


def _flags(module: list[ast.stmt]) -> dict[str, ast.expr]:
    """Module-level flags a ``try`` of imports sets one way and its ``except ImportError`` the other
    (``HAVE_X = True`` / ``HAVE_X = False``): name -> the flag's value as an expression of the imports' test."""
    found: dict[str, ast.expr] = {}
    for node in (n for n in module if isinstance(n, ast.Try)):
        imports = [_Import(s).test for s in node.body if isinstance(s, ast.ImportFrom)]
        if not imports:
            continue
        handlers = [s for h in node.handlers if _catches_import_error(h) for s in h.body]
        tried, fallen = _constants(node.body), _constants(handlers)
        for name in tried.keys() & fallen.keys():
            found[name] = ast.IfExp(
                ast.BoolOp(ast.And(), imports), ast.Constant(tried[name]), ast.Constant(fallen[name])
            )
    return found


def _cached(body: list[ast.stmt]) -> dict[str, tuple[ast.expr, ast.expr]]:
    """Names a function reads from where it keeps a decision, computing it where nothing is kept yet
    (``mode = getattr(model, "_mode", None)`` then ``if mode is None: mode = _resolve(model)``): name -> (the read,
    what is computed where it gives None)."""
    found: dict[str, tuple[ast.expr, ast.expr]] = {}
    for first, then in itertools.pairwise(body):
        if not (
            isinstance(first, ast.Assign)
            and len(first.targets) == 1
            and isinstance(first.targets[0], ast.Name)
            and isinstance(then, ast.If)
            and not then.orelse
        ):
            continue
        name = first.targets[0].id
        test = then.test
        is_none = isinstance(test, ast.Compare) and ast.unparse(test) == f"{name} is None"
        computed = [
            s.value for s in then.body if isinstance(s, ast.Assign) and [ast.unparse(t) for t in s.targets] == [name]
        ]
        if is_none and len(computed) == 1:
            found[name] = (first.value, computed[0])
    return found


def _constants(body: list[ast.stmt]) -> dict[str, object]:
    """Names a block binds to a literal (``HAVE_X = True``)."""
    return {
        target.id: statement.value.value
        for statement in body
        if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }


class _Reader:
    def __init__(
        self,
        body: list[ast.stmt],
        target: ast.stmt,
        names: dict[str, str],
        versions: Versions,
        module: list[ast.stmt],
        objects: dict[str, str] | None = None,
        attributes: dict[str, object] | None = None,
    ) -> None:
        self.names = names
        self.versions = versions
        self.module = module
        self.assigned: dict[str, ast.expr] = {}
        self.objects = objects or {}
        self.attributes = attributes or {}
        """Attributes of ``self`` with the values the patching function set on the object."""
        bound: dict[str, list[ast.expr]] = {}
        fallbacks = {
            id(n)
            for h in ast.walk(ast.Module(body=body, type_ignores=[]))
            if isinstance(h, ast.ExceptHandler)
            for n in ast.walk(h)
        }
        for node in ast.walk(ast.Module(body=body, type_ignores=[])):
            if id(node) in fallbacks:
                continue  # what a failed try falls back to: the try's own binding is the one read
            for target, value in _bindings(node):
                for name in (n for n in ast.walk(target) if isinstance(n, ast.Name)):
                    bound.setdefault(name.id, []).append(value)
        # A name bound once, to what does not change after (a container may be filled later): its value is read.
        for name, values in bound.items():
            if len(values) == 1 and values[0] is not None and not isinstance(values[0], ast.List | ast.Dict | ast.Set):
                self.assigned[name] = values[0]
        for node in module:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigned.setdefault(node.targets[0].id, node.value)
        self.fallbacks = _fallbacks(module)
        self.flags = _flags(module)
        self.cached = _cached(body)
        self.functions = {n.name: n for n in module if isinstance(n, ast.FunctionDef)}
        """The module's own functions: a check may call one (``if _resolve_mode(model) == "hook":``)."""

    def dotted(self, node: ast.expr) -> str | None:
        """``node`` as a dotted path, its first name resolved through the names the patch sees."""
        written = dotted_name(node)
        if written is None:
            return None
        head, dot, rest = written.partition(".")
        return f"{self.names.get(head, head).lstrip('=')}{dot}{rest}"

    def value(self, node: ast.expr, depth: int = 0) -> object:
        if depth > 20:
            return UNKNOWN
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            values = [self.value(e, depth + 1) for e in node.elts]
            return UNKNOWN if UNKNOWN in values else tuple(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self.value(node.operand, depth + 1)
            return UNKNOWN if inner is UNKNOWN else not inner
        if isinstance(node, ast.BoolOp):
            return self._bool(node, depth)
        if isinstance(node, ast.Compare):
            return self._compare(node, depth)
        if isinstance(node, ast.Name) and node.id not in self.assigned:
            resolved = self.names.get(node.id, "").lstrip("=")
            if resolved.endswith("__version__"):
                package = resolved.split(".")[0]
                return {"megatron": self.versions.megatron, "torch": self.versions.torch}.get(package, UNKNOWN)
            if resolved.rpartition(".")[2] in DEVICE_FLAGS and node.id not in self.fallbacks:
                return DEVICE_FLAGS[resolved.rpartition(".")[2]]
        if isinstance(node, ast.Name) and node.id in self.fallbacks:
            imported = self.value(self.fallbacks[node.id], depth + 1)
            return UNKNOWN if imported is UNKNOWN else PRESENT if imported else None
        if isinstance(node, ast.Name) and node.id in self.flags and node.id not in self.assigned:
            return self.value(self.flags[node.id], depth + 1)
        if isinstance(node, ast.Name) and node.id in self.cached:
            first, then = self.cached[node.id]
            held = self.value(first, depth + 1)
            return UNKNOWN if held is UNKNOWN else self.value(then, depth + 1) if held is None else held
        if isinstance(node, ast.IfExp):
            test = self.value(node.test, depth + 1)
            return UNKNOWN if test is UNKNOWN else self.value(node.body if test else node.orelse, depth + 1)
        if isinstance(node, ast.Name) and node.id in self.assigned:
            return self.value(self.assigned[node.id], depth + 1)
        if isinstance(node, ast.Attribute):
            return self._attribute(node, depth)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            held = self.value(node.value, depth + 1)
            try:
                return held[node.slice.value] if isinstance(held, tuple) else UNKNOWN
            except (IndexError, TypeError):
                return UNKNOWN
        return UNKNOWN

    def _signature(self, node: ast.expr) -> object:
        """``inspect.signature(<Megatron function or method>)``: its parameter names, as :class:`_Parameters`."""
        text = ast.unparse(node)
        head, _, rest = text.partition(".")
        if head in self.objects:
            found = self.versions.parameters(f"{self.objects[head]}.{rest}", True)
        else:
            dotted = self.dotted(node)
            if dotted is None and isinstance(node, ast.Name) and node.id in self.assigned:
                dotted = self.dotted(self.assigned[node.id])
            found = self.versions.parameters(dotted, False) if dotted and is_megatron(dotted) else None
        return UNKNOWN if found is None else _Parameters(found)

    def _returned(self, function: ast.FunctionDef, call: ast.Call, depth: int) -> object:
        """What a call of the module's own ``function`` returns on this target: the first ``return`` whose
        conditions hold, read in the function with its parameters holding the call's Megatron objects and the
        values read here; UNKNOWN where a condition on the way, or the value, cannot be read (or the helpers call
        each other deeper than checks do)."""
        if depth > HELPER_DEPTH:
            return UNKNOWN
        parameters = [a.arg for a in function.args.args]
        objects: dict[str, str] = {}
        values: dict[str, ast.expr] = {}
        for parameter, argument in zip(parameters, call.args, strict=False):
            if ast.unparse(argument) in self.objects:
                objects[parameter] = self.objects[ast.unparse(argument)]
                continue
            held = self.value(argument, depth + 1)
            if held is not UNKNOWN and (held is None or isinstance(held, str | int | float | bool)):
                values[parameter] = ast.Constant(held)
        for statement in sorted(own_returns(function), key=lambda r: (r.lineno, r.col_offset)):
            reader = _Reader(function.body, statement, self.names, self.versions, self.module, objects)
            reader.assigned.update(values)
            held = [
                (reader.value(test, depth + 1), wanted) for test, wanted, _ in _conditions(function.body, statement)
            ]
            if any(value is UNKNOWN for value, _ in held):
                return UNKNOWN
            if all(bool(value) == wanted for value, wanted in held):
                return None if statement.value is None else reader.value(statement.value, depth + 1)
        return UNKNOWN

    def _bool(self, node: ast.BoolOp, depth: int) -> object:
        values = [self.value(v, depth + 1) for v in node.values]
        is_and = isinstance(node.op, ast.And)
        known = [bool(v) for v in values if v is not UNKNOWN]
        if is_and and False in known:
            return False
        if not is_and and True in known:
            return True
        return UNKNOWN if UNKNOWN in values else is_and

    def _compare(self, node: ast.Compare, depth: int) -> object:
        left = self.value(node.left, depth + 1)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.value(right_node, depth + 1)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            result = _compared(op, left, right)
            if result is UNKNOWN or not result:
                return result
            left = right
        return True

    def _attribute(self, node: ast.Attribute, depth: int) -> object:
        if isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self.attributes:
            return self.attributes[node.attr]
        dotted = self.dotted(node)
        if dotted is not None and dotted.endswith(".__version__"):
            package = dotted.split(".")[0]
            return {"megatron": self.versions.megatron, "torch": self.versions.torch}.get(package, UNKNOWN)
        if node.attr == "parameters":
            held = self.value(node.value, depth + 1)
            return held.names if isinstance(held, _Parameters) else UNKNOWN
        if node.attr == "base_version":
            inner = self.value(node.value, depth + 1)
            return ".".join(map(str, inner.key() or (0,))) if isinstance(inner, _Version) else UNKNOWN
        if dotted is not None and dotted.split(".")[-1] in ("HAVE_TE", "HAVE_APEX"):
            return True
        return UNKNOWN

    def _call(self, node: ast.Call, depth: int) -> object:
        name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
        arguments = [self.value(a, depth + 1) for a in node.args]
        if name == "signature" and len(node.args) == 1:
            return self._signature(node.args[0])
        if name == "getattr" and len(node.args) >= 2 and ast.unparse(node.args[0]) == "self":
            held = arguments[1]
            if isinstance(held, str) and held in self.attributes:
                return self.attributes[held]
        if name == "getattr" and len(node.args) == 3 and ast.unparse(node.args[0]) in self.objects:
            # An attribute the framework keeps on Megatron's object (a cached decision): unset until it sets it.
            kind, held = self.objects[ast.unparse(node.args[0])], arguments[1]
            if isinstance(held, str) and not self.versions.defines(f"{kind}.{held}"):
                return arguments[2]
        if name in ("issubset", "issuperset") and isinstance(node.func, ast.Attribute) and len(arguments) == 1:
            held, other = self.value(node.func.value, depth + 1), arguments[0]
            if isinstance(held, tuple) and isinstance(other, tuple):
                return set(held) <= set(other) if name == "issubset" else set(held) >= set(other)
            return UNKNOWN
        if name in ("list", "tuple") and len(arguments) == 1 and isinstance(arguments[0], tuple):
            return arguments[0]
        if name == "len" and len(arguments) == 1 and isinstance(arguments[0], tuple):
            return len(arguments[0])
        if name == "__imports__":
            return all(self.versions.defines(str(a)) for a in arguments if is_megatron(str(a)))
        if name in ("parse", "Version", "LooseVersion", "parse_version") and len(arguments) == 1:
            text = arguments[0]
            if isinstance(text, _Version):
                return text
            return _Version(text) if isinstance(text, str) else UNKNOWN
        if name == "hasattr" and len(node.args) == 2 and isinstance(arguments[1], str):
            built = self.objects.get(ast.unparse(node.args[0]))
            if built is not None:
                return self.versions.built(built, arguments[1])
            owner = self.dotted(node.args[0])
            if owner is not None and is_megatron(owner):
                return self.versions.defines(f"{owner}.{arguments[1]}")
            return UNKNOWN
        if name in DEVICE_CALLS and not node.args:
            return DEVICE_CALLS[name]
        if isinstance(node.func, ast.Name) and node.func.id in self.functions and node.func.id not in self.names:
            return self._returned(self.functions[node.func.id], node, depth)
        return UNKNOWN


def _compared(op: ast.cmpop, left: object, right: object) -> object:
    if isinstance(op, ast.In | ast.NotIn):
        if not isinstance(right, tuple | str):
            return UNKNOWN
        found = left in right
        return found if isinstance(op, ast.In) else not found
    ordering = isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE)
    versions = (
        isinstance(left, str) and isinstance(right, str) and VERSION_TEXT.match(left) and VERSION_TEXT.match(right)
    )
    if isinstance(left, _Version) or isinstance(right, _Version) or (ordering and versions):
        left = left.key() if isinstance(left, _Version) else release(str(left))
        right = right.key() if isinstance(right, _Version) else release(str(right))
    operations = {
        ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b,
        ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b,
        ast.Eq: lambda a, b: a == b,
        ast.NotEq: lambda a, b: a != b,
        ast.Is: lambda a, b: a is b,
        ast.IsNot: lambda a, b: a is not b,
    }
    operation = operations.get(type(op))
    try:
        return UNKNOWN if operation is None else operation(left, right)
    except TypeError:
        return UNKNOWN
