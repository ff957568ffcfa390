"""``megatron-conformance scan [PATH]``: a starter declaration for the framework under PATH, written from its source.

The output is a declaration that reads as it is: ``[subject]`` and every Megatron symbol the framework touches
(:mod:`harness.subjects.scan`), each with its usage word and where it is used. What the source alone cannot settle
is written as guesses, commented out and marked ``# guess``: how the patch is applied and undone (from the function
that makes each patch assignment), where the budget lives and in what unit (from the apply function's parameters, the
module's globals and the environment variables it reads), and the provider wrapper and its ``args`` names. Editing
the guesses (uncommenting what is right) is the whole of the work left.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.subjects.declaration import ROLE_ATTRIBUTES
from harness.subjects.scan import FrameworkScan, Patch, scan_framework
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
    applied, apply, undo = _how_applied(first, found)
    lines += ["# [patch]  # guess", f'# module = "{first.module}"', f'# applied = "{applied}"']
    if apply:
        lines.append(f'# {"context" if applied == "context" else "apply"} = "{apply}"')
    if undo:
        lines.append(f'# undo = "{undo}"')
    lines += _budget_guess(tree, apply)
    return lines


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


def _budget_guess(tree: ast.Module, apply: str | None) -> list[str]:
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == apply), None)
    arguments = [a.arg for a in (function.args.args + function.args.kwonlyargs if function else [])]
    budget_argument = next((a for a in arguments if _BUDGET_NAME.search(a)), None)
    globals_ = [
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign | ast.AnnAssign)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name) and t.id.isupper() and _BUDGET_NAME.search(t.id)
    ]
    environment = sorted(
        {
            c.value
            for c in ast.walk(tree)
            if isinstance(c, ast.Constant)
            and isinstance(c.value, str)
            and c.value.isupper()
            and _BUDGET_NAME.search(c.value)
        }
    )
    lines = ["# [budget]  # guess"]
    if budget_argument:
        lines.append(f'# argument = "{budget_argument}"')
        if re.search(r"mb|mib", budget_argument, re.IGNORECASE):
            lines.append('# unit = "MiB"')
    for name in globals_[:1]:
        lines.append(f'# global = "{name}"')
    for name in environment[:1]:
        lines.append(f'# env = "{name}"')
    if len(lines) == 1:
        lines.append("# nothing found: name the apply argument (budget.argument) or the module global (budget.global)")
    return lines


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
    """``scan [PATH] [--output FILE]``: print (or write) the starter declaration of the framework under PATH."""
    arguments = list(sys.argv[1:] if argv is None else argv)
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
