"""The call shapes of the model provider, read from Megatron's own ``get_model``.

A provider wrapper must accept every keyword Megatron's training loop passes. For the pip wheels 0.13-0.16 those
keywords are only known from Megatron-LM's sources, so ``matrix.yaml`` records them; from 0.17 the wheel ships
``megatron/training/training.py``, and a local tree or git checkout always has it. Where the file is installed the
gate reads ``get_model``'s calls of its provider parameter (AST, nothing imported) and holds them against the matrix,
so a release that starts passing a new keyword turns the matrix entry red instead of silently going untested.

Each call is named by what distinguishes it: ``virtual_pipeline`` when it passes ``vp_stage``, ``encoder_decoder``
when it passes ``add_encoder``/``add_decoder``, ``plain`` otherwise (the names the matrix uses).

``python -m harness.targets.provider_shapes`` prints the provider contract of the running interpreter's installed
Megatron as JSON: these shapes and ``GPTModel``'s process-group keyword (the ``candidate`` session writes them into the
candidate's matrix entry).
"""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import json
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.targets.matrix import MEGATRON_DISTRIBUTION

_PROCESS_GROUPS_MODULE = "megatron.core.process_groups_config"

_TRAINING_FILE = "megatron/training/training.py"
_GET_MODEL = "get_model"


class ProviderShapeError(ValueError):
    """``get_model`` could not be read as a set of provider calls; the message names the file and line."""


@dataclass(frozen=True)
class DerivedCall:
    """One call of the provider inside ``get_model``: its shape name, keywords in call order, and where it is."""

    shape: str
    keywords: tuple[str, ...]
    line: int
    positional: int

    def where(self, file: Path | str) -> str:
        return f"{file}:{self.line}"


def installed_training_file() -> Path | None:
    """``megatron/training/training.py`` of the installed megatron-core, or ``None`` when the wheel lacks it."""
    try:
        files = importlib.metadata.distribution(MEGATRON_DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if str(file).replace("\\", "/") == _TRAINING_FILE:
            path = Path(file.locate()).resolve()
            return path if path.is_file() else None
    return None


def _shape_name(keywords: tuple[str, ...]) -> str:
    """The matrix's name for a call passing ``keywords``."""
    if "vp_stage" in keywords:
        return "virtual_pipeline"
    if "add_encoder" in keywords or "add_decoder" in keywords:
        return "encoder_decoder"
    return "plain"


def derive_calls(source: str, file: str = _TRAINING_FILE) -> list[DerivedCall]:
    """Every call of ``get_model``'s first parameter in ``source``, nested functions included, in line order."""
    tree = ast.parse(source, filename=file)
    function = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == _GET_MODEL), None
    )
    if function is None:
        raise ProviderShapeError(f"{file}: no module-level function {_GET_MODEL}()")
    arguments = [*function.args.posonlyargs, *function.args.args]
    if not arguments:
        raise ProviderShapeError(f"{file}:{function.lineno}: {_GET_MODEL}() takes no provider parameter")
    provider = arguments[0].arg
    calls = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == provider:
            if any(k.arg is None for k in node.keywords):
                raise ProviderShapeError(f"{file}:{node.lineno}: {provider}(**...) passes keywords not readable here")
            keywords = tuple(k.arg for k in node.keywords if k.arg is not None)
            calls.append(DerivedCall(_shape_name(keywords), keywords, node.lineno, len(node.args)))
    if not calls:
        raise ProviderShapeError(f"{file}:{function.lineno}: {_GET_MODEL}() never calls its provider {provider!r}")
    return sorted(calls, key=lambda c: c.line)


def derive_shapes(calls: list[DerivedCall]) -> dict[str, tuple[str, ...]]:
    """The matrix form of ``calls``: shape name to keywords, ``pre_process``/``post_process`` first."""
    shapes: dict[str, tuple[str, ...]] = {}
    for call in calls:
        ordered = tuple(sorted(call.keywords, key=lambda k: k not in ("pre_process", "post_process")))
        shapes.setdefault(call.shape, ordered)
    return shapes


def shape_mismatches(calls: list[DerivedCall], recorded: dict[str, tuple[str, ...]], file: Path | str) -> list[str]:
    """Every way the matrix's call shapes differ from the calls Megatron makes; empty when they agree.

    A keyword Megatron passes that the matrix lacks, a keyword the matrix lists that Megatron does not pass, a shape
    the matrix lacks, a recorded shape Megatron never makes, and a positional argument (a wrapper sees it by
    position, which the matrix cannot express) are each one line naming the keyword or shape and the line.
    """
    problems = []
    made: set[str] = set()
    for call in calls:
        where = call.where(file)
        made.add(call.shape)
        if call.positional:
            problems.append(f"{where}: the provider gets {call.positional} positional argument(s): not recordable")
        listed = recorded.get(call.shape)
        if listed is None:
            problems.append(
                f"{where}: Megatron calls the provider as shape '{call.shape}' with {list(call.keywords)}; "
                f"the matrix records no such shape"
            )
            continue
        for keyword in call.keywords:
            if keyword not in listed:
                problems.append(
                    f"{where}: Megatron passes keyword '{keyword}' in shape '{call.shape}'; the matrix does not list it"
                )
        for keyword in listed:
            if keyword not in call.keywords:
                problems.append(
                    f"{where}: the matrix lists keyword '{keyword}' in shape '{call.shape}'; Megatron does not pass it"
                )
    for shape in recorded:
        if shape not in made:
            problems.append(f"{file}: the matrix records shape '{shape}', which {_GET_MODEL}() never makes")
    return problems


def process_group_parameter(init: Callable[..., Any]) -> tuple[str, type] | None:
    """The keyword through which ``init`` takes Megatron's process-group bundle, and the bundle's class; or None.

    The parameter is recognised by its annotation naming a class of Megatron's process-group module, not by its name:
    the name is what changed between releases (``model_comm_pgs`` in 0.14, ``pg_collection`` from 0.15).
    """
    found = []
    for param in inspect.signature(init, eval_str=True).parameters.values():
        for candidate in (param.annotation, *typing.get_args(param.annotation)):
            if isinstance(candidate, type) and candidate.__module__ == _PROCESS_GROUPS_MODULE:
                found.append((param.name, candidate))
    if len(found) > 1:
        raise RuntimeError(f"{init.__qualname__} takes several process-group parameters: {found}")
    return found[0] if found else None


def main(argv: list[str] | None = None) -> int:
    """Print the installed Megatron's provider contract as JSON; ``calls`` is ``null`` without a training loop."""
    del argv
    from megatron.core.models.gpt.gpt_model import GPTModel

    derived = process_group_parameter(GPTModel.__init__)
    contract: dict[str, object] = {
        "process_group_keyword": derived[0] if derived else None,
        "file": None,
        "calls": None,
    }
    training = installed_training_file()
    if training is not None:
        try:
            calls = derive_calls(training.read_text(), str(training))
        except ProviderShapeError as err:
            print(err, file=sys.stderr)
            return 1
        contract.update(file=str(training), calls={k: list(v) for k, v in derive_shapes(calls).items()})
    print(json.dumps(contract))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
