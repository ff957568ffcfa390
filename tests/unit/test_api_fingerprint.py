"""The API fingerprint on small synthetic modules: declaration, source scan, fingerprints, replacement checks and
the api-diff. The real targets, a renamed-parameter candidate and the seeded subjects are in
``tests/e2e/test_api_fingerprint_targets.py``."""

from __future__ import annotations

import importlib
import itertools
import os
import re
import sys
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.contracts.api_fingerprint.checks import changed_copies, replacement_problems, unbound_calls
from harness.contracts.api_fingerprint.inspection import body_hash, fingerprint_symbols, parameters, signature_text
from harness.reports.api_diff import (
    CALLS_ADDED,
    CALLS_REMOVED,
    NEW_REDUCTION,
    READS_ADDED,
    READS_REMOVED,
    build_report,
    diff,
    parameter_changes,
    render_markdown,
)
from harness.source.source_scan import CallSite, scan_sources, undeclared_uses
from harness.source.symbol_table import (
    DeclarationError,
    parse_body_hashes,
    parse_declaration,
    read_body_hashes,
)
from harness.subjects.declaration import DeclarationFileError, read_declaration_file
from harness.subjects.loading import load_subject

FINALIZE = "megatron.core.distributed.finalize_model_grads"


# --- declaration ------------------------------------------------------------------------------------------------


def test_declaration_forms() -> None:
    entries = parse_declaration(
        {
            "m.a:f": "calls",
            "m.a:g": "replaces with my_g",
            "m.a:h": "calls, optional",
            "m.a:C.x | m.a:C.y": "reads",
            "m.a:C.z": "replaces",
        }
    )
    assert [(e.members, e.usage, e.optional, e.replacement) for e in entries] == [
        (("m.a:f",), "calls", False, None),
        (("m.a:g",), "replaces", False, "my_g"),
        (("m.a:h",), "calls", True, None),
        (("m.a:C.x", "m.a:C.y"), "reads", False, None),
        (("m.a:C.z",), "replaces", False, None),
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"m.a.f": "calls"}, "'m.a.f' is not of the form module:qualname"),
        ({"m.a:f": "uses"}, "expected one of imports, calls, reads, replaces, relies"),
        ({"m.a:f": "calls with g"}, "'with <subject name>' goes with 'replaces'"),
        ({"m.a:f": "calls", "m.a:g | m.a:f": "reads"}, "m.a:f is already declared by 'm.a:f'"),
        ({}, "must be a non-empty dict"),
    ],
)
def test_declaration_errors_name_the_entry(raw: dict[str, str], message: str) -> None:
    with pytest.raises(DeclarationError, match=re.escape(message)):
        parse_declaration(raw)


# --- fingerprints of synthetic modules --------------------------------------------------------------------------


@pytest.fixture
def versions(tmp_path: Path) -> Callable[[str, list[str]], dict[str, dict[str, Any]]]:
    """Fingerprint one release of a synthetic module: each call installs its source under the same module name."""
    name = f"synthetic_{uuid.uuid4().hex[:8]}"
    releases = itertools.count()

    def fingerprint(source: str, qualnames: list[str]) -> dict[str, dict[str, Any]]:
        directory = tmp_path / f"release{next(releases)}"
        directory.mkdir()
        (directory / f"{name}.py").write_text(textwrap.dedent(source))
        sys.path.insert(0, str(directory))
        importlib.invalidate_caches()
        try:
            prints = fingerprint_symbols(f"{name}:{q}" for q in qualnames)
        finally:
            sys.path.remove(str(directory))
            sys.modules.pop(name, None)
        for fp in prints.values():
            for call in fp.get("calls") or []:
                call["target"] = call["target"].replace(f"{name}:", "m:")
        return {f"m:{symbol.split(':', 1)[1]}": fp for symbol, fp in prints.items()}

    return fingerprint


def test_body_hash_ignores_docstrings_comments_and_layout(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    plain = versions("def f(x):\n    y = x + 1\n    return y\n", ["f"])
    noisy = versions(
        '''
        def f(x):
            """Adds one."""
            # a comment
            y = (x +
                 1)

            return y  # done
        ''',
        ["f"],
    )
    changed = versions("def f(x):\n    y = x + 2\n    return y\n", ["f"])
    assert plain["m:f"]["body_hash"] == noisy["m:f"]["body_hash"]
    assert plain["m:f"]["body_hash"] != changed["m:f"]["body_hash"]
    assert body_hash(len) is None


def test_fingerprint_records_kind_module_signature_and_fields(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    prints = versions(
        """
        import dataclasses

        @dataclasses.dataclass
        class Config:
            flag: bool = False
            items: list = dataclasses.field(default_factory=list)
            required: int = dataclasses.field(default=0, kw_only=True)

        def f(a, /, b: int, c=None, *args, d, e=object(), **kwargs):
            return a
        """,
        ["f", "Config", "Config.flag", "Config.items", "Config.missing", "nothing"],
    )
    function = prints["m:f"]
    assert function["kind"] == "function" and function["exists"]
    assert signature_text(function["parameters"]) == "(a, /, b, c=None, *args, d, e=<object object>, **kwargs)"
    assert function["parameters"][1] == {
        "name": "b",
        "kind": "POSITIONAL_OR_KEYWORD",
        "default": None,
        "annotation": "int",
    }
    assert prints["m:Config"]["kind"] == "dataclass"
    assert [(f["name"], f["default"]) for f in prints["m:Config"]["fields"]] == [
        ("flag", "False"),
        ("items", "factory list"),
        ("required", "0"),
    ]
    assert prints["m:Config.flag"] == {
        "exists": True,
        "kind": "dataclass-field",
        "module": prints["m:Config"]["module"],
        "name": "flag",
        "type": "bool",
        "default": "False",
    }
    assert prints["m:Config.items"]["kind"] == "dataclass-field"
    assert (
        not prints["m:Config.missing"]["exists"]
        and "has no attribute 'missing'" in prints["m:Config.missing"]["missing"]
    )
    assert not prints["m:nothing"]["exists"]
    assert not fingerprint_symbols(["no_such_module_xyz:f"])["no_such_module_xyz:f"]["exists"]


RELEASE_1 = """
import dataclasses

@dataclasses.dataclass
class Config:
    use_custom_flag: bool = False
    old_field: int = 1

def _reduce(model, config):
    \"\"\"All-reduce.\"\"\"
    return model

def _grad_attr(param, use_custom_flag: bool = False):
    return "main_grad"

def _helper(x, flag: bool = False):
    return x

def finalize(model, num_tokens=None, groups: "OldGroups" = None):
    return _reduce(model, None)
"""

RELEASE_2 = """
import dataclasses

@dataclasses.dataclass
class Config:
    use_new_flag: bool = False
    items: list = dataclasses.field(default_factory=list)

def _reduce(model, config, group=None):
    return [model]

def _grad_attr(param):
    return "main_grad"

def _helper(x, switch: bool = False):
    return x

def finalize(model, num_tokens=None, collection: "NewCollection" = None, force=False):
    return _reduce(model, None)
"""

SYNTHETIC_DECLARATION = {
    "m:_reduce": "replaces with reduce",
    "m:_grad_attr": "calls",
    "m:_helper": "calls",
    "m:finalize": "relies",
    "m:Config": "reads",
    "m:Config.use_new_flag | m:Config.use_custom_flag": "reads",
}


def test_diff_of_two_releases(versions: Callable[[str, list[str]], dict[str, dict[str, Any]]]) -> None:
    declaration = parse_declaration(SYNTHETIC_DECLARATION)
    qualnames = [m.split(":")[1] for e in declaration for m in e.members]
    before, after = versions(RELEASE_1, qualnames), versions(RELEASE_2, qualnames)
    rows = {
        (
            row["symbol"],
            row["change"],
            "" if row["change"] in ("body changed", "removed") else row["detail"],
            row["review"],
        )
        for row in diff(declaration, before, after)
    }
    assert rows == {
        ("m:_reduce", "parameter added", "`group=None` at position 3", False),
        ("m:_reduce", "body changed", "", True),
        ("m:_grad_attr", "parameter removed", "`use_custom_flag=False` (was position 2)", False),
        ("m:_helper", "parameter renamed", "`flag` → `switch` (position 2)", False),
        ("m:finalize", "parameter removed", "`groups=None` (was position 3)", False),
        ("m:finalize", "parameter added", "`collection=None` at position 3", False),
        ("m:finalize", "parameter added", "`force=False` at position 4", False),
        ("m:Config", "fields removed", "`use_custom_flag=False`, `old_field=1`", False),
        ("m:Config", "fields added", "`use_new_flag=False`, `items=factory list`", False),
        ("m:Config.use_new_flag", "added", "dataclass-field", False),
        ("m:Config.use_custom_flag", "removed", "", False),
        (
            "m:Config.use_new_flag | m:Config.use_custom_flag",
            "renamed",
            "`use_custom_flag` → `use_new_flag` (`use_custom_flag` is gone)",
            False,
        ),
    }

    meta = {"megatron_core": "1", "origin": None, "key": "k", "cached": False, "subject": "s"}
    declared = [{**e.__dict__, "members": list(e.members)} for e in declaration]
    report = build_report(
        {**meta, "session": "a", "symbols": before, "declaration": declared},
        {**meta, "session": "b", "symbols": after, "declaration": declared},
    )
    markdown = render_markdown(report)
    assert "## Review your copy" in markdown and "its own `reduce`" in markdown
    assert "| `m:Config.use_new_flag \\| m:Config.use_custom_flag` | reads | renamed |" in markdown


def test_a_changed_annotation_is_not_a_rename() -> None:
    def param(name: str, annotation: str) -> dict[str, Any]:
        return {"name": name, "kind": "POSITIONAL_OR_KEYWORD", "default": "None", "annotation": annotation}

    changes = parameter_changes([param("groups", "Old")], [param("collection", "New")])
    assert [c for c, _ in changes] == ["parameter removed", "parameter added"]
    assert [c for c, _ in parameter_changes([param("a", "T")], [param("b", "T")])] == ["parameter renamed"]


# --- calls and config reads -------------------------------------------------------------------------------------

FINALIZE_HELPERS = """
def all_reduce(tensor, group=None):
    return tensor

def _flatten_dense_tensors(tensors):
    return list(tensors)

def get_model_config(model):
    return model.config

def _allreduce_non_tp(model, config):
    return config.sequence_parallel

def _allreduce_replicated(model, calculate_per_token_loss=False):
    grads = [param.grad for param in model]
    coalesced = _flatten_dense_tensors(grads)
    all_reduce(coalesced)

def _sync_one(model):
    all_reduce(model[0])

def _log(model):
    return len(model)
"""

FINALIZE_BEFORE = (
    FINALIZE_HELPERS
    + """
def finalize(model):
    config = get_model_config(model)
    if config.timers is not None and getattr(config, "old_flag", False):
        config.timers("sync")
    _allreduce_non_tp(model, config)
    return model
"""
)

FINALIZE_WITH_REDUCTION = (
    FINALIZE_HELPERS
    + """
def finalize(model):
    config = get_model_config(model)
    if config.timers is not None and getattr(config, "gtp_size", 1) > 1:
        config.timers("sync")
    _allreduce_non_tp(model, config)
    _allreduce_replicated(model, calculate_per_token_loss=config.calculate_per_token_loss)
    return model
"""
)

FINALIZE_WITH_PLAIN_CALLS = (
    FINALIZE_HELPERS
    + """
def finalize(model):
    config = get_model_config(model)
    if config.timers is not None and getattr(config, "old_flag", False):
        config.timers("sync")
    _allreduce_replicated(model)
    _allreduce_non_tp(model, config)
    _log(model)
    _sync_one(model)
    return model
"""
)

CALL_DECLARATION = {"m:_allreduce_non_tp": "replaces with allreduce_non_tp", "m:finalize": "relies"}


def _report(declaration: list[Any], before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    meta = {"megatron_core": "1", "origin": None, "key": "k", "cached": False, "subject": "s"}
    declared = [{**e.__dict__, "members": list(e.members)} for e in declaration]
    return build_report(
        {**meta, "session": "a", "symbols": before, "declaration": declared},
        {**meta, "session": "b", "symbols": after, "declaration": declared},
    )


def test_fingerprint_records_calls_in_order_and_config_reads(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    function = versions(
        FINALIZE_HELPERS
        + """
import os

def finalize(model, config, _log=None):
    from os.path import join as joined
    local = get_model_config(model)
    local.flag = config.stored
    _log(model)
    _allreduce_replicated(model, getattr(local, "via_getattr", None), hasattr(config, "via_hasattr"))
    os.getcwd()
    joined("a", "b")
    len(model)
    return getattr(model, "not_config", None)
""",
        ["finalize"],
    )["m:finalize"]
    assert [
        (call["name"], call["line"], call["target"], call["coalesced_reduction"]) for call in function["calls"]
    ] == [
        ("get_model_config", 2, "m:get_model_config", False),
        ("_allreduce_replicated", 5, "m:_allreduce_replicated", True),
        ("os.getcwd", 6, f"{os.getcwd.__module__}:getcwd", None),
        ("joined", 7, "os.path:join", None),
    ]
    assert function["config_reads"] == ["stored", "via_getattr", "via_hasattr"]


def test_new_coalesced_reduction_after_the_replaced_call_heads_the_review(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    declaration = parse_declaration(CALL_DECLARATION)
    before = versions(FINALIZE_BEFORE, ["_allreduce_non_tp", "finalize"])
    after = versions(FINALIZE_WITH_REDUCTION, ["_allreduce_non_tp", "finalize"])
    file, first_line = after["m:finalize"]["source"].rsplit(":", 1)
    call_line = (
        FINALIZE_WITH_REDUCTION.splitlines().index(
            "    _allreduce_replicated(model, calculate_per_token_loss=config.calculate_per_token_loss)"
        )
        + 1
    )
    sentence = (
        "`finalize` now calls `_allreduce_replicated` right after the patched `_allreduce_non_tp`: a new coalesced "
        "reduction (one flat buffer, all-reduced) that a chunked replacement of `_allreduce_non_tp` (the subject's "
        f"`allreduce_non_tp`) does not cover. Upstream calls it at `{file}:{call_line}`."
    )
    assert int(first_line) < call_line
    rows = [(row["symbol"], row["change"], row["detail"], row["review"]) for row in diff(declaration, before, after)]
    assert rows == [
        ("m:finalize", "body changed", rows[0][2], False),
        (
            "m:finalize",
            CALLS_ADDED,
            "`_allreduce_replicated` (right after the patched `_allreduce_non_tp`; coalesced reduction)",
            False,
        ),
        ("m:finalize", NEW_REDUCTION, sentence, True),
        ("m:finalize", READS_ADDED, "`calculate_per_token_loss`, `gtp_size`", False),
        ("m:finalize", READS_REMOVED, "`old_flag`", False),
    ]

    report = _report(declaration, before, after)
    assert [(row["symbol"], row["finding"]) for row in report["review"]] == [("m:finalize", sentence)]
    markdown = render_markdown(report)
    head = markdown[: markdown.index("## Changes")]
    assert f"## Review your copy\n\n- **`m:finalize`**: {sentence}\n" in head
    assert (
        "| `m:finalize` | relies | reads new config attributes | `calculate_per_token_loss`, `gtp_size` |" in markdown
    )

    backwards = {(row["change"], row["detail"]) for row in diff(declaration, after, before)}
    assert (CALLS_REMOVED, "`_allreduce_replicated`") in backwards
    assert (READS_REMOVED, "`calculate_per_token_loss`, `gtp_size`") in backwards
    assert (READS_ADDED, "`old_flag`") in backwards
    assert NEW_REDUCTION not in {change for change, _ in backwards}


def test_a_new_call_that_does_not_coalesce_is_only_a_call_change(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    declaration = parse_declaration(CALL_DECLARATION)
    before = versions(FINALIZE_BEFORE, ["_allreduce_non_tp", "finalize"])
    after = versions(FINALIZE_WITH_PLAIN_CALLS, ["_allreduce_non_tp", "finalize"])
    classified = {call["name"]: call["coalesced_reduction"] for call in after["m:finalize"]["calls"]}
    assert classified == {
        "get_model_config": False,
        "_allreduce_replicated": True,
        "_allreduce_non_tp": False,
        "_log": False,
        "_sync_one": False,
    }
    rows = [(row["change"], row["detail"], row["review"]) for row in diff(declaration, before, after)]
    assert [row for row in rows if row[0] != "body changed"] == [
        (
            CALLS_ADDED,
            "`_allreduce_replicated` (before the patched `_allreduce_non_tp`; coalesced reduction), "
            "`_log` (right after the patched `_allreduce_non_tp`), `_sync_one` (after the patched `_allreduce_non_tp`)",
            False,
        )
    ]
    report = _report(declaration, before, after)
    assert report["review"] == []
    assert "## Review your copy" not in render_markdown(report)


def test_changed_calls_and_reads_of_a_replaced_function_are_named_in_its_review(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    declaration = parse_declaration(CALL_DECLARATION)
    before = versions(FINALIZE_BEFORE, ["_allreduce_non_tp", "finalize"])
    changed = FINALIZE_BEFORE.replace(
        "    return config.sequence_parallel\n", "    _log(model)\n    return config.qk_layernorm\n"
    )
    after = versions(changed, ["_allreduce_non_tp", "finalize"])
    review = _report(declaration, before, after)["review"]
    assert [(row["symbol"], row["change"]) for row in review] == [("m:_allreduce_non_tp", "body changed")]
    assert review[0]["finding"].startswith(
        "upstream's body changed between a and b (now calls `_log`; reads new config attributes: `qk_layernorm`; "
        "no longer reads config attributes: `sequence_parallel`), and the subject replaces it with its own "
        "`allreduce_non_tp`."
    )


# --- copied upstream bodies -------------------------------------------------------------------------------------

COPIED = """
def _reduce(model, config):
    \"\"\"All-reduce the non-TP grads.\"\"\"
    for param in model:
        if getattr(param, "average", False):
            param.avg = True
        elif config.sequence_parallel and getattr(param, "sequence_parallel", False):
            param.sum = True

class Config:
    pass
"""
COPIED_REWORDED = COPIED.replace('"""All-reduce the non-TP grads."""', "# reworded, no docstring")
COPIED_WITH_A_NEW_RULE = COPIED.replace(
    'getattr(param, "average", False):', 'getattr(param, "average", False) or getattr(param, "average_v2", False):'
)


def test_a_copied_body_is_red_once_upstream_changes_it(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    copied = versions(COPIED, ["_reduce"])["m:_reduce"]["body_hash"]
    declared = parse_body_hashes({"m:_reduce": copied})
    assert changed_copies(declared, versions(COPIED, ["_reduce"])) == []
    assert changed_copies(declared, versions(COPIED_REWORDED, ["_reduce"])) == []
    installed = versions(COPIED_WITH_A_NEW_RULE, ["_reduce"])
    assert changed_copies(declared, installed) == [
        f"upstream `m:_reduce` changed since the subject copied it: body hash {installed['m:_reduce']['body_hash']} "
        f"on this target, the subject declares {copied}"
    ]
    assert installed["m:_reduce"]["body_hash"] != copied


def test_a_copied_body_that_is_gone_or_unhashable_is_red(
    versions: Callable[[str, list[str]], dict[str, dict[str, Any]]],
) -> None:
    prints = versions(COPIED, ["gone", "Config"])
    declared = {"m:gone": "0" * 16, "m:Config": "1" * 16}
    assert changed_copies(declared, prints) == [
        f"upstream `m:gone`, which the subject copied, does not exist here: {prints['m:gone']['missing']}",
        "upstream `m:Config` is a class here, not a function whose body was copied",
    ]
    builtin = {"m:f": {"exists": True, "kind": "function", "body_hash": None}}
    assert changed_copies({"m:f": "2" * 16}, builtin) == [
        f"upstream `m:f` has no source on this target to hash, so the subject's copy (body hash {'2' * 16}) cannot be "
        "checked"
    ]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([("m.a:f", "0" * 16)], "must be a dict of symbol -> body hash"),
        ({"m.a.f": "0" * 16}, "UPSTREAM_BODY_HASHES['m.a.f']: the key is not of the form module:qualname"),
        ({"m.a:f": "0" * 64}, "expected the fingerprint's body hash, 16 lowercase hex digits"),
        ({"m.a:f": "ABCDEF0123456789"}, "expected the fingerprint's body hash"),
        ({"m.a:f": 12}, "expected the fingerprint's body hash"),
    ],
)
def test_body_hash_declaration_errors_name_the_entry(raw: object, message: str) -> None:
    with pytest.raises(DeclarationError, match=re.escape(message)):
        parse_body_hashes(raw)


def test_body_hashes_are_opt_in_and_declarations_carry_them(tmp_path: Path) -> None:
    assert read_body_hashes(ModuleType("declares_none")) == {}
    package = tmp_path / "src" / "copyframe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    symbol = f"{FINALIZE}:_allreduce_non_tensor_model_parallel_grads"
    declaration = tmp_path / "conformance.toml"
    declaration.write_text(
        textwrap.dedent(
            f"""
            [subject]
            source_root = "src"
            adapter_package = "copyframe"

            [megatron_symbols]
            "{symbol}" = "relies"

            [upstream_body_hashes]
            "{symbol}" = "c36be900cd564ade"
            """
        )
    )
    assert read_declaration_file(declaration).upstream_body_hashes == {symbol: "c36be900cd564ade"}
    assert read_body_hashes(load_subject(str(declaration))) == {symbol: "c36be900cd564ade"}
    declaration.write_text(declaration.read_text().replace('"c36be900cd564ade"', "[1]"))
    with pytest.raises(DeclarationFileError, match=re.escape(f"key 'upstream_body_hashes.{symbol}'")):
        read_declaration_file(declaration)


# --- signature checks -------------------------------------------------------------------------------------------


def _params(func: Callable[..., Any]) -> list[dict[str, Any]]:
    found = parameters(func)
    assert found is not None
    return found


def _upstream(model: object, config: object, tp_group: object = None) -> None: ...


@pytest.mark.parametrize(
    ("replacement", "problem"),
    [
        (lambda model, config, tp_group=None: None, None),
        (lambda model, config, tp_group=None, budget=1: None, None),
        (lambda *args, **kwargs: None, None),
        (lambda model, config: None, "upstream's parameter 3 'tp_group' has no counterpart"),
        (lambda model, config, group=None: None, "upstream's parameter 3 'tp_group' is named 'group'"),
        (lambda model, config, tp_group: None, "'tp_group' has a default (None), the replacement requires it"),
        (lambda model, config, tp_group=None, *, budget: None, "the replacement requires 'budget'"),
        (lambda model, /, config, tp_group=None: None, "'model' is positional-only in the replacement"),
        (lambda model, config, *args: None, "'tp_group' cannot be passed by keyword"),
    ],
)
def test_replacement_must_accept_every_call_upstream_accepts(replacement: Callable[..., Any], problem: str) -> None:
    problems = replacement_problems(_params(_upstream), _params(replacement))
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_one_binding_call_shape_is_enough() -> None:
    def two(param: object, flag: bool = False) -> None: ...

    def one(param: object) -> None: ...

    shapes = [CallSite("x", 2, (), "a.py", 1), CallSite("x", 1, (), "a.py", 2)]
    assert unbound_calls(_params(two), shapes) == []
    assert unbound_calls(_params(one), shapes) == []
    failures = unbound_calls(_params(one), shapes[:1])
    assert [(call.line, "too many positional arguments" in why) for call, why in failures] == [(1, True)]


# --- the source scan --------------------------------------------------------------------------------------------


def _write(directory: Path, files: dict[str, str]) -> list[Path]:
    directory.mkdir()
    for name, source in files.items():
        (directory / name).write_text(textwrap.dedent(source))
    return sorted(directory.glob("*.py"))


SUBJECT_FILES = {
    "api.py": """
        import importlib

        FINALIZE = "megatron.core.distributed.finalize_model_grads"

        def finalize_module():
            return importlib.import_module(FINALIZE)

        def takes_flag(module):
            return module._get_main_grad_attr
        """,
    "impl.py": """
        from megatron.core import parallel_state
        from megatron.core.utils import get_attr_wrapped_model as wrapped
        from . import api

        ALIAS = "_allreduce_layernorm"

        def run(model, *extra):
            module = api.finalize_module()
            module._allreduce(model, None)
            module._allreduce(*extra)
            resolver = getattr(module, "get_group", None)
            parallel_state.get_tp_group()
            wrapped(model, attr="named_parameters")
            if hasattr(module, ALIAS):
                module._legacy = run
            return resolver, module.__name__
        """,
}


def test_scan_follows_imports_constants_helpers_and_getattr(tmp_path: Path) -> None:
    scan = scan_sources(_write(tmp_path / "subject", SUBJECT_FILES))
    paths = {path for use in scan.uses for path in use.paths}
    assert paths == {
        FINALIZE,
        f"{FINALIZE}._get_main_grad_attr",
        f"{FINALIZE}._allreduce",
        f"{FINALIZE}.get_group",
        f"{FINALIZE}._allreduce_layernorm",
        f"{FINALIZE}._legacy",
        "megatron.core.parallel_state",
        "megatron.core.parallel_state.get_tp_group",
        "megatron.core.utils.get_attr_wrapped_model",
    }
    shapes = {(c.path.rsplit(".", 1)[1], c.positional, c.keywords, c.file) for c in scan.calls}
    assert shapes == {
        ("_allreduce", 2, (), "impl.py"),
        ("get_tp_group", 0, (), "impl.py"),
        ("get_attr_wrapped_model", 1, ("attr",), "impl.py"),
    }
    declaration = parse_declaration(
        {
            f"{FINALIZE}:_allreduce": "replaces with allreduce",
            f"{FINALIZE}:_allreduce_layernorm": "replaces with allreduce, optional",
            f"{FINALIZE}:_legacy": "replaces with allreduce, optional",
            f"{FINALIZE}:get_group | megatron.core.parallel_state:get_tp_group": "calls",
            "megatron.core.utils:get_attr_wrapped_model": "calls",
        }
    )
    undeclared = undeclared_uses(scan, declaration)
    assert {(use.paths, use.file) for use in undeclared} == {((f"{FINALIZE}._get_main_grad_attr",), "api.py")}


def test_scan_stops_following_a_name_bound_to_something_else(tmp_path: Path) -> None:
    files = {
        **SUBJECT_FILES,
        "other.py": """
            def weights(model):
                for module in model.modules():
                    module.weight.zero_()
            """,
    }
    paths = {path for use in scan_sources(_write(tmp_path / "subject", files)).uses for path in use.paths}
    assert f"{FINALIZE}.weight" not in paths
    assert f"{FINALIZE}._get_main_grad_attr" not in paths
    assert "megatron.core.parallel_state.get_tp_group" in paths


# --- real targets -----------------------------------------------------------------------------------------------
