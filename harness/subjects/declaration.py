"""A subject declaration: a data file that maps the roles the gate checks to a framework's own names and conventions.

A real adapter was not written for this gate: its patch applies itself at import, its budget is a module global, its
provider wrapper reads freeze rules under the framework's names. Rather than glue code that re-implements part of the
behaviour under test, the framework states those facts here and the harness drives its code as it is
(:mod:`harness.subjects.declared`). Every problem is one line naming the file, the key and the reason.

The file is TOML: a ``.toml`` file of its own, or the ``[tool.megatron-conformance]`` table of a ``pyproject.toml``.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from harness.formats.budget_units import UNITS
from harness.formats.effect_kinds import ALLOWANCE_KINDS
from harness.formats.keys import key_problem
from harness.formats.megatron_symbols import DeclarationError, parse_copied_from, parse_declaration, parse_usage
from harness.subjects.scale_models import scale_table

PYPROJECT_TABLE = "megatron-conformance"
ROLES = ("splitter", "patch", "provider", "megatron_symbols")
"""The tables a family needs before it can run (each family names its own: ``Family.role`` in
``harness/plugin/families.py``); the families without a role run on every declaration."""

PROVIDER_FLAGS = ("inner_takes_kwargs", "nested")
"""``[provider]`` booleans (default false) that make the wrapper's promises mandatory: forwarding keywords into an
inner provider that takes ``**kwargs``, and the freeze rules of wrappers applied one over another. Undeclared, the
cases that check them are advisories: a framework whose inner providers name their keywords, and which wraps once,
never meets either."""

_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "subject": (
        ("adapter_package",),
        ("source_root", "strict", "require", "label", "requirements", "distribution", "leave_out"),
    ),
    "patch": (("module", "applied"), ("apply", "undo", "function", "context", "arguments")),
    "symbols_patch": (("module",), ("applied", "apply", "context", "undo", "arguments", "model_argument", "instances")),
    "budget": ((), ("global", "env", "argument", "unit", "whole_units")),
    "splitter": (("function",), ("arguments", "returns")),
    "provider": (("factory",), ("train_only", "freeze", "match", "call_shapes", *PROVIDER_FLAGS)),
    "allow": ((), ALLOWANCE_KINDS),
    "scale": (("models",), ("budget",)),
}
_FREE_TABLES = ("megatron_symbols", "upstream_body_hashes", "copied_from", "expected_failures")

_APPLIED = ("import", "call", "context")
"""How a patch is applied: by importing its module, by calling ``apply`` (undone by ``undo``), or by entering the
context manager ``context`` (undone by leaving it)."""
UNDO_RETURNED = "returned"
"""``undo = "returned"``: ``apply`` returns what undoes it (a callable, or an object whose ``undo`` method does);
``undo = "returned.<method>"`` names the method."""
_SPLITTER_ARGUMENTS = ("params", "grads", "budget")
_SPLITTER_RETURNS = ("pairs", "grads", "indices")
"""What a splitter returns: ``(params, grads)`` pairs, lists of the grads it was given, or lists of their indices."""
MATCH_MODES = ("search", "match", "fullmatch")
ROLE_ATTRIBUTES = {
    "patch": ("allreduce_non_tensor_model_parallel_grads",),
    "splitter": ("split_into_chunks",),
    "provider": ("wrap_model_provider",),
}
"""The callables a declared subject exposes for each role it declares: what ``replaces with <name>`` can name."""


class DeclarationFileError(ValueError):
    """A declaration that cannot be used, worded ``<file>: key '<key>': <reason>``."""

    def __init__(self, path: Path, key: str, reason: str) -> None:
        super().__init__(f"{path}: key '{key}': {reason}")
        self.path, self.key, self.reason = path, key, reason


@dataclass(frozen=True)
class Declaration:
    """A checked declaration. Dotted names are as written (``module`` or ``module:qualname``); they are resolved when
    the subject is built, where a name that does not resolve is reported against its key."""

    path: Path
    source_root: Path
    adapter_package: str
    strict: bool = False
    require: tuple[str, ...] = ()
    """Families that must run: a role they need left undeclared is a red, not a skip (names checked by the gate)."""
    patch: Mapping[str, Any] = field(default_factory=dict)
    symbols_patch: Mapping[str, Any] = field(default_factory=dict)
    """``[symbols_patch]``: the apply (and undo) that bind the replacements ``[megatron_symbols]`` names with
    ``replaces with``, other than the chunked all-reduce's."""
    budget: Mapping[str, Any] = field(default_factory=dict)
    splitter: Mapping[str, Any] = field(default_factory=dict)
    provider: Mapping[str, Any] = field(default_factory=dict)
    allow: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    megatron_symbols: Mapping[str, str] = field(default_factory=dict)
    upstream_body_hashes: Mapping[str, str] = field(default_factory=dict)
    copied_from: Mapping[str, str] = field(default_factory=dict)
    """The megatron-core release each replacement that is a copy of upstream's was taken from."""
    expected_failures: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scale: Mapping[str, Any] = field(default_factory=dict)
    """``[scale]``: the models to measure at their real size, and the budget to judge them by."""
    lines: int = 0
    given_label: str | None = None
    """``[subject] label``: what the report calls this subject, where the framework names it itself."""
    requirements: tuple[str, ...] = ()
    """``[subject] requirements``: what the framework needs installed beside Megatron, as pip requirement strings;
    a path (``"."``) installs the framework in that folder itself, as ``pip install .`` does
    (:mod:`harness.install.framework_install`)."""
    distribution: str | None = None
    """``[subject] distribution``: the framework as published (``"verl==0.9.1"``, ``"ms-swift[megatron]==4.6.0"``),
    installed from the index with its dependencies and imported from there: no checkout needed."""
    leave_out: tuple[str, ...] = ()
    """``[subject] leave_out``: distributions the framework depends on that are not installed (a CUDA-only build),
    by name."""

    @property
    def installed(self) -> bool:
        """Whether the framework is installed into the venv the cases run in (``distribution``, or a path among its
        ``requirements``): it is then imported from there, never from ``source_root``."""
        return self.distribution is not None or any(is_local_requirement(r) for r in self.requirements)

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles this declaration declares, among :data:`ROLES`."""
        return tuple(role for role in ROLES if getattr(self, role))

    @property
    def packages(self) -> set[str]:
        """The top-level packages the declared names live in: the framework's own code."""
        names = (
            self.adapter_package,
            self.patch.get("module"),
            self.splitter.get("function"),
            self.provider.get("factory"),
        )
        return {name.split(":")[0].split(".")[0] for name in names if name}

    @property
    def label(self) -> str:
        """``[subject] label`` where given, else the framework's adapter package and where this file lies below its
        source root, e.g. ``modernrl.backends.megatron_utils (megatron-conformance.toml)``: every declaration has the
        same file name, so the name alone tells no two apart."""
        if self.given_label:
            return self.given_label
        if self.distribution:
            return f"{self.adapter_package} ({self.distribution})"
        return f"{self.adapter_package} ({os.path.relpath(self.path, self.source_root)})"

    def provider_flag(self, name: str) -> bool:
        """The ``[provider]`` boolean ``name`` (one of :data:`PROVIDER_FLAGS`); false where not declared."""
        return bool(self.provider.get(name, False))

    def fail(self, key: str, reason: str) -> DeclarationFileError:
        return DeclarationFileError(self.path, key, reason)


def is_local_requirement(requirement: str) -> bool:
    """Whether a ``[subject] requirements`` entry is a folder (``"."``, ``"../framework"``) rather than a name."""
    return requirement == "." or requirement.startswith(("./", "../", "/"))


def is_declaration(spec: str) -> bool:
    """Whether a subject spec names a declaration file rather than a module or a ``.py`` path."""
    return spec.endswith(".toml")


def read_declaration_file(path: str | Path) -> Declaration:
    """Read and check the declaration at ``path``; a :class:`DeclarationFileError` names what is wrong."""
    path = Path(path).resolve()
    try:
        text = path.read_text()
    except OSError as err:
        raise DeclarationFileError(path, "-", f"cannot read the file: {err.strerror or err}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise DeclarationFileError(path, "-", f"not valid TOML: {err}") from None
    if path.name == "pyproject.toml":
        raw = raw.get("tool", {}).get(PYPROJECT_TABLE)
        if not isinstance(raw, dict):
            raise DeclarationFileError(path, f"tool.{PYPROJECT_TABLE}", "missing: the declaration lives in this table")
    return _checked(path, raw, _declaration_lines(text, path.name == "pyproject.toml"))


def _declaration_lines(text: str, in_pyproject: bool) -> int:
    """Lines that say something (no blank or comment lines); in a pyproject, only those of the gate's tables."""
    counted, inside = 0, not in_pyproject
    for line in text.splitlines():
        stripped = line.strip()
        if in_pyproject and stripped.startswith("["):
            inside = stripped.strip("[]").startswith(f"tool.{PYPROJECT_TABLE}")
        if inside and stripped and not stripped.startswith("#"):
            counted += 1
    return counted


def _checked(path: Path, raw: dict[str, Any], lines: int) -> Declaration:
    problem = key_problem(raw, ("subject",), (*(t for t in _TABLES if t != "subject"), *_FREE_TABLES))
    if problem:
        raise DeclarationFileError(path, *problem)
    tables = {}
    for name, (required, optional) in _TABLES.items():
        table = raw.get(name, {})
        if not isinstance(table, dict):
            raise DeclarationFileError(path, name, f"must be a table, not {type(table).__name__}")
        if name in raw:
            problem = key_problem(table, required, optional)
            if problem:
                raise DeclarationFileError(path, f"{name}.{problem[0]}", problem[1])
        tables[name] = table
    subject = tables["subject"]
    distribution = _distribution(path, subject.get("distribution"))
    if distribution and "source_root" in subject:
        raise DeclarationFileError(
            path, "subject.source_root", "the framework of 'distribution' is imported from where it is installed"
        )
    root = (path.parent / _string(path, "subject.source_root", subject.get("source_root", "."))).resolve()
    if not root.is_dir():
        raise DeclarationFileError(path, "subject.source_root", f"{root} is not a directory")
    strict = _boolean(path, "subject.strict", subject.get("strict", False))
    symbols, copies = _megatron_symbols(path, raw.get("megatron_symbols", {}), _table(path, raw, "copied_from"))
    declaration = Declaration(
        path=path,
        source_root=root,
        adapter_package=_dotted(path, "subject.adapter_package", subject["adapter_package"], qualified=False),
        strict=strict,
        require=_patterns(path, "subject.require", subject.get("require", [])),
        patch=_patch(path, tables["patch"]),
        symbols_patch=_symbols_patch(path, tables["symbols_patch"]),
        budget=_budget(path, tables["budget"]),
        splitter=_splitter(path, tables["splitter"]),
        provider=_provider(path, tables["provider"]),
        allow={k: _patterns(path, f"allow.{k}", v) for k, v in tables["allow"].items()},
        megatron_symbols=symbols,
        copied_from=copies,
        upstream_body_hashes=_string_table(path, "upstream_body_hashes", raw.get("upstream_body_hashes", {})),
        expected_failures={
            k: _patterns(path, f"expected_failures.{k}", v) for k, v in _table(path, raw, "expected_failures").items()
        },
        scale=scale_table(path, tables["scale"], lambda key, reason: DeclarationFileError(path, key, reason)),
        lines=lines,
        given_label=_label(path, subject.get("label")),
        requirements=_patterns(path, "subject.requirements", subject.get("requirements", [])),
        distribution=distribution,
        leave_out=tuple(
            canonicalize_name(n) for n in _patterns(path, "subject.leave_out", subject.get("leave_out", []))
        ),
    )
    _check_roles(declaration)
    _check_replacements(declaration)
    return declaration


def _distribution(path: Path, value: object) -> str | None:
    """``[subject] distribution``: one published release, ``name==version`` (extras allowed), where given."""
    if value is None:
        return None
    text = _string(path, "subject.distribution", value).strip()
    try:
        requirement = Requirement(text)
    except InvalidRequirement as err:
        raise DeclarationFileError(path, "subject.distribution", f"{text!r} is not a requirement: {err}") from None
    pins = [s for s in requirement.specifier if s.operator == "=="]
    if len(pins) != 1 or len(requirement.specifier) != 1 or requirement.url or "*" in pins[0].version:
        raise DeclarationFileError(
            path, "subject.distribution", f"{text!r} must name one release, as '<name>==<version>'"
        )
    return text


def _label(path: Path, value: object) -> str | None:
    """``[subject] label``: one line of text, not empty, where given."""
    if value is None:
        return None
    text = _string(path, "subject.label", value).strip()
    if not text or "\n" in text:
        raise DeclarationFileError(path, "subject.label", "must be one non-empty line of text")
    return text


def _megatron_symbols(path: Path, table: object, copied: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """The ``[megatron_symbols]`` table, each entry checked as ``MEGATRON_SYMBOLS`` is, so that a misspelt usage is
    refused here, against its key, rather than found by a case (or never); and the release each copy was taken from,
    from entries written as tables and from ``[copied_from]`` (``copied``)."""
    if not isinstance(table, dict):
        raise DeclarationFileError(path, "megatron_symbols", f"must be a table, not {type(table).__name__}")
    symbols: dict[str, str] = {}
    copies: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):  # { usage = "replaces with m:f", copied_from = "0.13.1" }
            problem = key_problem(value, ("usage",), ("copied_from",))
            if problem:
                raise DeclarationFileError(path, f"megatron_symbols.{key}.{problem[0]}", problem[1])
            value, copies[key] = value["usage"], value.get("copied_from")
            if copies[key] is None:
                del copies[key]
        symbols[str(key)] = _string(path, f"megatron_symbols.{key}", value)
    for key, release in copied.items():
        if key in copies:
            raise DeclarationFileError(path, f"copied_from.{key}", "given beside the symbol in megatron_symbols too")
        copies[key] = release
    if not symbols:
        if copies:
            raise DeclarationFileError(path, "copied_from", "names copies of symbols megatron_symbols does not declare")
        return symbols, {}
    try:
        entries = parse_declaration(symbols)
    except DeclarationError as err:
        raise DeclarationFileError(path, f"megatron_symbols.{err.key}", err.reason) from None
    try:
        return symbols, parse_copied_from(copies, entries)
    except DeclarationError as err:
        raise DeclarationFileError(path, f"copied_from.{err.key}", err.reason) from None


def _check_replacements(declaration: Declaration) -> None:
    """``replaces with <name>`` must name a callable the declared subject will have (one of its roles'), or the
    framework's own function by ``module:qualname``, resolved where the api-fingerprint family checks it."""
    exposed = [name for role in declaration.roles for name in ROLE_ATTRIBUTES.get(role, ())]
    for key, value in declaration.megatron_symbols.items():
        usage, replacement, _ = parse_usage(key, value)
        if key in declaration.symbols_patch.get("instances", ()) and usage != "replaces":
            raise declaration.fail(
                f"megatron_symbols.{key}", f"{value!r}: [symbols_patch] instances lists it, so it 'replaces'"
            )
        if usage == "replaces" and replacement is None and not declaration.symbols_patch:
            raise declaration.fail(
                f"megatron_symbols.{key}",
                f"{value!r} names no replacement: declare [symbols_patch], whose apply binds it, or write "
                "'replaces with <module>:<qualname>'",
            )
        if replacement is not None and ":" not in replacement and replacement not in exposed:
            offered = ", ".join(exposed) or "nothing: no [patch], [splitter] or [provider] is declared"
            raise declaration.fail(
                f"megatron_symbols.{key}",
                f"{value!r}: a declared subject has no {replacement!r}; its roles expose {offered}; name the "
                "framework's own function as module:qualname",
            )


def _check_roles(declaration: Declaration) -> None:
    """The roles that only work together: the harness sets the budget of the patch it installs."""
    patch, budget = declaration.patch, declaration.budget
    if budget and not patch:
        raise declaration.fail("budget", "declared without [patch]: the budget belongs to the patch module")
    if patch and not budget:
        raise declaration.fail("budget", "missing: with [patch], say how the budget is set (global or argument)")
    if budget and not set(budget) & {"global", "argument"}:
        raise declaration.fail(
            "budget",
            "names neither global nor argument: a budget read from the environment at import lands in a module "
            "global; name it (budget.global), or the apply argument (budget.argument); env alone is informational",
        )
    if "argument" in budget and patch.get("applied") == "import":
        raise declaration.fail(
            "budget.argument", 'only an apply function (applied = "call") or a context manager takes an argument'
        )
    argument = str(budget.get("argument", "")).partition(".")[0]
    if argument and argument in patch.get("arguments", {}) and not isinstance(patch["arguments"][argument], dict):
        raise declaration.fail(
            "patch.arguments", f"{argument!r} is where budget.argument puts the budget: give it as a table, or leave it"
        )


def _budget(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    """``[budget]``: names as strings, ``unit`` one of :data:`UNITS`, ``whole_units`` a boolean (only with a unit),
    ``argument`` a keyword of apply or ``keyword.attribute`` (the attribute of an argument the harness builds as an
    ``argparse.Namespace``)."""
    budget: dict[str, Any] = {k: _string(path, f"budget.{k}", v) for k, v in table.items() if k != "whole_units"}
    if "whole_units" in table:
        if "unit" not in table:
            raise DeclarationFileError(path, "budget.whole_units", "goes with budget.unit: bytes are whole already")
        budget["whole_units"] = _boolean(path, "budget.whole_units", table["whole_units"])
    if "unit" in budget and budget["unit"] not in UNITS:
        raise DeclarationFileError(
            path, "budget.unit", f"{budget['unit']!r} is not a unit: expected one of {', '.join(UNITS)}"
        )
    argument = budget.get("argument")
    if argument is not None:
        parts = argument.split(".")
        if len(parts) > 2 or not all(part.isidentifier() for part in parts):
            raise DeclarationFileError(
                path, "budget.argument", f"{argument!r} is not a keyword of apply, or keyword.attribute of one"
            )
    return budget


def _patch(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    if not table:
        return {}
    patch: dict[str, Any] = {k: _string(path, f"patch.{k}", v) for k, v in table.items() if k != "arguments"}
    patch["module"] = _dotted(path, "patch.module", patch["module"], qualified=False)
    applied = _applied_form(path, "patch", patch, undone_by_undo=("call",))
    if "arguments" in table:
        if applied == "import":
            raise DeclarationFileError(path, "patch.arguments", 'applied = "import" calls nothing to pass them to')
        if not isinstance(table["arguments"], dict):
            raise DeclarationFileError(path, "patch.arguments", "must be a table of keyword = value")
        patch["arguments"] = dict(table["arguments"])
    for key in ("apply", "context", "function"):
        if key in patch and not patch[key].isidentifier():
            raise DeclarationFileError(path, f"patch.{key}", f"{patch[key]!r} is not a name in the patch module")
    undo = patch.get("undo", "")
    returned, dot, method = undo.partition(".")
    if undo and not (undo.isidentifier() or (returned == UNDO_RETURNED and dot and method.isidentifier())):
        raise DeclarationFileError(
            path,
            "patch.undo",
            f"{undo!r} is neither a name in the patch module nor {UNDO_RETURNED!r} / '{UNDO_RETURNED}.<method>' "
            "(what apply returns undoes it)",
        )
    return patch


def _applied_form(
    path: Path, name: str, patch: dict[str, Any], undone_by_undo: tuple[str, ...], default: str | None = None
) -> str:
    """How the patch of table ``name`` is applied (``applied``, one of :data:`_APPLIED`; ``default`` where it may be
    left out), checked against the functions it names: ``apply`` for a call, ``context`` for a context manager,
    ``undo`` only for the forms in ``undone_by_undo``."""
    applied = patch.setdefault("applied", default) if default else patch["applied"]
    if applied not in _APPLIED:
        raise DeclarationFileError(path, f"{name}.applied", f"must be one of {', '.join(_APPLIED)}, not {applied!r}")
    needed = {"call": "apply", "context": "context"}.get(applied)
    if needed and needed not in patch:
        raise DeclarationFileError(
            path, f"{name}.{needed}", f'missing required key: applied = "{applied}" names the {needed} function'
        )
    for key in ("apply", "context", "undo"):
        if key in patch and key != needed and not (key == "undo" and applied in undone_by_undo):
            raise DeclarationFileError(path, f"{name}.{key}", f'applied = "{applied}" has no {key} function')
    return applied


def _symbols_patch(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    """``[symbols_patch]``: applied by calling ``apply`` (the default), by entering ``context``, or by importing
    ``module``; ``undo`` where one is declared (leaving the context undoes that form)."""
    if not table:
        return {}
    listed = ("arguments", "instances", "apply")
    patch: dict[str, Any] = {k: _string(path, f"symbols_patch.{k}", v) for k, v in table.items() if k not in listed}
    patch["module"] = _dotted(path, "symbols_patch.module", patch["module"], qualified=False)
    if "apply" in table:
        patch["apply"] = _apply_functions(path, table["apply"])
    if "undo" in patch and patch.get("applied") == "context":
        raise DeclarationFileError(path, "symbols_patch.undo", 'applied = "context" is undone by leaving the context')
    applied = _applied_form(path, "symbols_patch", patch, undone_by_undo=("call", "import"), default="call")
    if applied == "import" and set(table) & {"arguments", "model_argument", "instances"}:
        key = sorted(set(table) & {"arguments", "model_argument", "instances"})[0]
        raise DeclarationFileError(path, f"symbols_patch.{key}", 'applied = "import" calls nothing to pass it to')
    if "instances" in table:
        if "model_argument" not in patch:
            raise DeclarationFileError(
                path,
                "symbols_patch.instances",
                "methods swapped on built instances need model_argument, the "
                "apply parameter that takes the built model",
            )
        patch["instances"] = _patterns(path, "symbols_patch.instances", table["instances"])
    for key in ("context", "undo", "model_argument"):
        if key in patch and not patch[key].isidentifier():
            raise DeclarationFileError(path, f"symbols_patch.{key}", f"{patch[key]!r} is not a name in its module")
    if "arguments" in table:
        if not isinstance(table["arguments"], dict):
            raise DeclarationFileError(path, "symbols_patch.arguments", "must be a table of keyword = value")
        patch["arguments"] = dict(table["arguments"])
    return patch


def _apply_functions(path: Path, value: object) -> tuple[str, ...]:
    """``[symbols_patch] apply``: one function or a list of them, applied one by one; each a name in the module, or
    ``module:function`` for one that lives elsewhere (frameworks spread their patches over several files)."""
    names = [value] if isinstance(value, str) else value
    names = _patterns(path, "symbols_patch.apply", names)
    for name in names:
        module, colon, function = name.rpartition(":")
        good = function.isidentifier() and (not colon or all(part.isidentifier() for part in module.split(".")))
        if not good:
            raise DeclarationFileError(
                path, "symbols_patch.apply", f"{name!r} is not a name in its module, nor '<module>:<function>'"
            )
    return names


def _splitter(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    if not table:
        return {}
    arguments = table.get("arguments", list(_SPLITTER_ARGUMENTS))
    names = list(map(str, arguments)) if isinstance(arguments, list) else []
    if sorted(names) not in (sorted(_SPLITTER_ARGUMENTS), sorted(_SPLITTER_ARGUMENTS[1:])):
        raise DeclarationFileError(
            path,
            "splitter.arguments",
            f"must order {list(_SPLITTER_ARGUMENTS)}, or {list(_SPLITTER_ARGUMENTS[1:])} for a splitter that takes "
            f"no params, not {arguments!r}",
        )
    returns = table.get("returns", "pairs" if "params" in names else "grads")
    if returns not in _SPLITTER_RETURNS:
        raise DeclarationFileError(
            path, "splitter.returns", f"must be one of {', '.join(_SPLITTER_RETURNS)}, not {returns!r}"
        )
    if returns == "pairs" and "params" not in names:
        raise DeclarationFileError(path, "splitter.returns", "'pairs' needs a splitter that takes the params")
    function = _dotted(path, "splitter.function", table["function"], qualified=True)
    return {"function": function, "arguments": names, "returns": returns}


def _provider(path: Path, table: dict[str, Any]) -> dict[str, Any]:
    if not table:
        return {}
    special = ("call_shapes", *PROVIDER_FLAGS)
    provider: dict[str, Any] = {k: _string(path, f"provider.{k}", v) for k, v in table.items() if k not in special}
    if "call_shapes" in table:
        provider["call_shapes"] = _patterns(path, "provider.call_shapes", table["call_shapes"])
    for flag in PROVIDER_FLAGS:
        provider[flag] = _boolean(path, f"provider.{flag}", table.get(flag, False))
    provider["factory"] = _dotted(path, "provider.factory", provider["factory"], qualified=True)
    if not (provider.get("train_only") or provider.get("freeze")):
        raise DeclarationFileError(path, "provider.freeze", "missing: name at least one of train_only, freeze")
    for key in ("train_only", "freeze"):
        if key in provider and not provider[key].isidentifier():
            raise DeclarationFileError(path, f"provider.{key}", f"{provider[key]!r} is not an attribute name of args")
    if provider.setdefault("match", "search") not in MATCH_MODES:
        raise DeclarationFileError(path, "provider.match", f"must be one of {', '.join(MATCH_MODES)}")
    return provider


def _dotted(path: Path, key: str, value: object, qualified: bool) -> str:
    """A dotted module name, or ``module:qualname`` when ``qualified``."""
    text = _string(path, key, value)
    module, colon, qualname = text.partition(":")
    parts = module.split(".") + (qualname.split(".") if colon else [])
    if qualified != bool(colon) or not all(part.isidentifier() for part in parts):
        shape = "module:qualname (e.g. pkg.mod:function)" if qualified else "a dotted module name (e.g. pkg.mod)"
        raise DeclarationFileError(path, key, f"{text!r} is not {shape}")
    return text


def _string(path: Path, key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise DeclarationFileError(path, key, f"must be a non-empty string, not {value!r}")
    return value


def _boolean(path: Path, key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise DeclarationFileError(path, key, f"must be true or false, not {value!r}")
    return value


def _patterns(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise DeclarationFileError(path, key, f"must be a list of strings, not {value!r}")
    return tuple(value)


def _table(path: Path, raw: dict[str, Any], key: str) -> dict[str, Any]:
    table = raw.get(key, {})
    if not isinstance(table, dict):
        raise DeclarationFileError(path, key, f"must be a table, not {type(table).__name__}")
    return table


def _string_table(path: Path, key: str, table: object) -> dict[str, str]:
    if not isinstance(table, dict):
        raise DeclarationFileError(path, key, f"must be a table, not {type(table).__name__}")
    return {str(k): _string(path, f"{key}.{k}", v) for k, v in table.items()}
