"""``megatron-conformance scan [PATH]``: a starter declaration for the framework under PATH, written from its source.

The output is a declaration that reads as it is: ``[subject]`` and every Megatron symbol the framework touches
(:mod:`~harness.contracts.api_fingerprint.framework_scan`), each with its usage word and where it is used. What the
source alone cannot settle is written as guesses, commented out and marked ``# guess``: how the patch is applied and
undone (from the function that makes each patch assignment), where the budget lives and in what unit (from the apply
function's parameters, the module's globals and the environment variables it reads), and the provider wrapper and
its ``args`` names. Editing the guesses (uncommenting what is right) is the whole of the work left.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.contracts.api_fingerprint.framework_scan import FrameworkScan, Patch, scan_framework
from harness.subjects.declaration import ROLE_ATTRIBUTES
from harness.targets.megatron_names import FINALIZE_MODULE, UPSTREAM_NAME

ROLE_REPLACEMENT = ROLE_ATTRIBUTES["patch"][0]
_BUDGET_NAME = re.compile(r"byte|budget|bucket|chunk|_mb$|^mb$|mib", re.IGNORECASE)
_PROVIDER_NAME = re.compile(r"provider", re.IGNORECASE)
_RULE_NAME = re.compile(r"freeze|frozen|train", re.IGNORECASE)


def megatron_trees(envdir: Path) -> list[Path]:
    """Folders holding a ``megatron`` package to name symbols against: every built target venv under ``envdir``
    (newest target first), else the running interpreter's."""
    trees = sorted(
        (p.parents[1] for p in envdir.glob("*/lib/python*/site-packages/megatron/core") if "-with-" not in str(p)),
        key=lambda p: p.parts[-4],
        reverse=True,
    )
    if trees:
        return trees
    return [Path(entry) for entry in sys.path if (Path(entry) / "megatron" / "core").is_dir()]


def starter_declaration(found: FrameworkScan, written_for: Path) -> str:
    """The declaration text for ``found``, with paths relative to ``written_for`` (where the file will live)."""
    source_root = os.path.relpath(found.root, written_for)
    adapter = _adapter_package(found)
    lines = [
        f"# Starter declaration, written by `megatron-conformance scan {source_root}` from the framework's source.",
        "# Lines marked '# guess' are what the source alone cannot settle: check them, uncomment what is right.",
        "[subject]",
        f'source_root = "{source_root}"',
        f'adapter_package = "{adapter}"  # guess: the package whose files reach Megatron',
        "",
        *_patch_guess(found),
        "",
        *_provider_guess(found),
        "",
        "[megatron_symbols]",
    ]
    for symbol in found.symbols:
        usage = symbol.usage
        comment = ", ".join(symbol.places[:3])
        if usage == "replaces":
            if symbol.replacement:
                usage = f"replaces with {symbol.replacement}"
            else:
                usage = "relies"
                comment = (
                    f"guess: replaced where {comment}; with [patch] declared, 'replaces with "
                    f"{ROLE_REPLACEMENT}' for {UPSTREAM_NAME}, else the replacement's module:qualname"
                )
        if symbol.optional:
            usage += ", optional"
        lines.append(f'"{symbol.key}" = "{usage}"  # {comment}')
    return "\n".join(lines) + "\n"


def _adapter_package(found: FrameworkScan) -> str:
    """The deepest package holding every file that reaches Megatron."""
    reaching = [found.modules[path] for path in found.modules if _reaches_megatron(path)] or list(
        found.modules.values()
    )
    parts = [name.split(".") for name in reaching]
    common = []
    for group in zip(*parts, strict=False):
        if len(set(group)) != 1:
            break
        common.append(group[0])
    packages = {name for path, name in found.modules.items() if path.name == "__init__.py"}
    while common and ".".join(common) not in packages:
        common.pop()
    return ".".join(common) or reaching[0]


def _reaches_megatron(path: Path) -> bool:
    return "megatron" in path.read_text()


def _patch_guess(found: FrameworkScan) -> list[str]:
    patches = [p for p in found.patches if p.key == f"{FINALIZE_MODULE}:{UPSTREAM_NAME}"] or found.patches
    if not patches:
        return ["# [patch]: no patch assignment of a Megatron symbol was found"]
    lines = ["# Patch assignments found (symbol <- value, by what):"]
    lines += [
        f"#   {p.key} <- {p.value}  in {p.module}:{p.scope or '<module body>'} ({p.place})" for p in found.patches
    ]
    first = patches[0]
    tree = found.trees[first.module]
    registry = _registered_as(tree, first.scope)
    module, applied, apply, undo = first.module, *_how_applied(first, found)
    if registry:
        module, apply = _registry_apply(found, first.module)
        undo = "returned"
    lines += ["# [patch]  # guess", f'# module = "{module}"', f'# applied = "{applied}"']
    if apply:
        lines.append(f'# {"context" if applied == "context" else "apply"} = "{apply}"')
    if undo:
        lines.append(f'# undo = "{undo}"')
    if registry:
        lines.append(f'# arguments = {{ names = ["{registry}"] }}  # the registry\'s patch, by its name')
    lines += _budget_guess(tree, apply, registry)
    return lines


def _registered_as(tree: ast.Module, scope: str) -> str | None:
    """The name a decorator registers the patch's function under (``@register_patch("name")``), if any."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == scope.split(".")[0]), None)
    for decorator in function.decorator_list if function else []:
        if isinstance(decorator, ast.Call) and decorator.args and isinstance(decorator.args[0], ast.Constant):
            if isinstance(decorator.args[0].value, str):
                return decorator.args[0].value
    return None


def _registry_apply(found: FrameworkScan, near: str) -> tuple[str, str | None]:
    """The package module exporting a function ``apply*`` that takes ``args`` (the registry's one call), nearest to
    the patch's module; else the patch's module."""
    candidates = []
    for module, tree in found.trees.items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("apply") and node.args.args:
                if node.args.args[0].arg == "args":
                    candidates.append((module, node.name))
    if not candidates:
        return near, None
    module, name = candidates[0]
    package = near.rpartition(".")[0]
    exported = package in found.trees and name in ast.unparse(found.trees[package])
    return (package if exported else module), name


def _how_applied(patch: Patch, found: FrameworkScan) -> tuple[str, str | None, str | None]:
    """``(applied, apply or context, undo)``: a module-level assignment applies at import; one inside ``__enter__``
    of a class is a context manager (named by the function that returns it, else the class); else the top function
    around it applies, and another function assigning the same symbol undoes."""
    if not patch.scope:
        return "import", None, None
    top = patch.scope.split(".")[0]
    tree = found.trees[patch.module]
    if patch.scope.endswith("__enter__"):
        maker = next(
            (
                node.name
                for node in tree.body
                if isinstance(node, ast.FunctionDef)
                and any(isinstance(c, ast.Call) and getattr(c.func, "id", None) == top for c in ast.walk(node))
            ),
            top,
        )
        return "context", maker, None
    undo = next(
        (
            p.scope.split(".")[0]
            for p in found.patches
            if p.key == patch.key and p.module == patch.module and p.scope and p.scope.split(".")[0] != top
        ),
        None,
    )
    return "call", top, undo


def _budget_guess(tree: ast.Module, apply: str | None, registry: str | None) -> list[str]:
    """Where the budget lives: a budget-like parameter of apply (``MiB`` where its name says so), an attribute of
    ``args`` read in the module (for a registry applied from an args namespace), a numeric module global, and the
    environment variable the module reads."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == apply), None)
    arguments = [a.arg for a in (function.args.args + function.args.kwonlyargs if function else [])]
    budget_argument = next((a for a in arguments if _BUDGET_NAME.search(a)), None)
    if registry and budget_argument is None:
        read = sorted(name for name in _args_attributes(tree) if _BUDGET_NAME.search(name))
        budget_argument = f"args.{read[0]}" if read else None
    constants = {
        t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    globals_ = [
        name
        for name, value in constants.items()
        if name.isupper()
        and _BUDGET_NAME.search(name)
        and isinstance(value, ast.Constant | ast.BinOp | ast.Call)
        and not (isinstance(value, ast.Constant) and isinstance(value.value, str))
    ]
    environment = sorted(_environment_reads(tree, constants))
    lines = ["# [budget]  # guess"]
    if budget_argument:
        lines.append(f'# argument = "{budget_argument}"')
        if re.search(r"mb|mib", budget_argument, re.IGNORECASE):
            lines.append('# unit = "MiB"')
    elif globals_:
        lines.append(f'# global = "{globals_[0]}"')
    for name in environment[:1]:
        lines.append(f'# env = "{name}"')
    if len(lines) == 1:
        lines.append("# nothing found: name the apply argument (budget.argument) or the module global (budget.global)")
    return lines


def _args_attributes(tree: ast.AST) -> set[str]:
    """Attributes read from a name ``args``: ``args.x`` and ``getattr(args, "x", ...)``."""
    read = {a.attr for a in ast.walk(tree) if isinstance(a, ast.Attribute) and getattr(a.value, "id", None) == "args"}
    for call in ast.walk(tree):
        if (
            isinstance(call, ast.Call)
            and getattr(call.func, "id", None) in ("getattr", "hasattr")
            and len(call.args) >= 2
            and getattr(call.args[0], "id", None) == "args"
            and isinstance(call.args[1], ast.Constant)
            and isinstance(call.args[1].value, str)
        ):
            read.add(call.args[1].value)
    return read


def _environment_reads(tree: ast.Module, constants: dict[str, ast.expr]) -> set[str]:
    """The environment variables the module reads by a literal or constant name (``os.environ.get``, ``os.getenv``,
    ``os.environ[...]``)."""
    names = set()
    for node in ast.walk(tree):
        argument = None
        if isinstance(node, ast.Call) and node.args:
            callee = ast.unparse(node.func)
            if callee in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                argument = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
            argument = node.slice
        if isinstance(argument, ast.Name):
            argument = constants.get(argument.id)
        if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
            names.add(argument.value)
    return names


def _provider_guess(found: FrameworkScan) -> list[str]:
    for module, tree in found.trees.items():
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or len(node.args.args) < 2:
                continue
            first, second = node.args.args[0].arg, node.args.args[1].arg
            if not (_PROVIDER_NAME.search(first) or _PROVIDER_NAME.search(node.name)) or second != "args":
                continue
            read = sorted(
                {
                    a.attr
                    for a in ast.walk(node)
                    if isinstance(a, ast.Attribute)
                    and getattr(a.value, "id", None) == "args"
                    and _RULE_NAME.search(a.attr)
                }
                | {
                    c.args[1].value
                    for c in ast.walk(node)
                    if isinstance(c, ast.Call)
                    and getattr(c.func, "id", None) == "getattr"
                    and len(c.args) >= 2
                    and isinstance(c.args[1], ast.Constant)
                    and isinstance(c.args[1].value, str)
                    and _RULE_NAME.search(c.args[1].value)
                }
            )
            freeze = next((r for r in read if re.search("freeze|frozen", r, re.IGNORECASE)), None)
            train = next((r for r in read if "train" in r.lower()), None)
            lines = ["# [provider]  # guess", f'# factory = "{module}:{node.name}"']
            lines += [f'# freeze = "{freeze}"'] if freeze else []
            lines += [f'# train_only = "{train}"'] if train else []
            return lines
    return ["# [provider]: no function taking (provider, args) was found"]


def main(argv: Sequence[str] | None = None, envdir: Path | None = None) -> int:
    """``scan [PATH] [--output FILE] [--envdir DIR]``: print (or write) the starter declaration of the framework
    under PATH, naming symbols against the target venvs under DIR (default ``.nox``)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--envdir" in arguments:
        index = arguments.index("--envdir")
        envdir = Path(arguments[index + 1]) if index + 1 < len(arguments) else envdir
        del arguments[index : index + 2]
    output = None
    if "--output" in arguments:
        index = arguments.index("--output")
        output = Path(arguments[index + 1]) if index + 1 < len(arguments) else None
        del arguments[index : index + 2]
        if output is None:
            print("megatron-conformance scan: --output needs a file", file=sys.stderr)
            return 2
    root = Path(arguments[0] if arguments else ".").resolve()
    if not root.is_dir():
        print(f"megatron-conformance scan: {root} is not a directory", file=sys.stderr)
        return 2
    trees = megatron_trees(envdir or Path(".nox"))
    if not trees:
        print(
            "megatron-conformance scan: no Megatron source to name symbols against: build a target first "
            "(megatron-conformance -s megatron-0.15), or run it where megatron-core is installed",
            file=sys.stderr,
        )
        return 2
    found = scan_framework(root, trees)
    text = starter_declaration(found, (output.resolve().parent if output else Path.cwd()))
    if output:
        output.write_text(text)
        print(f"{output}: {len(found.symbols)} Megatron symbols, {len(found.patches)} patch assignments")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
