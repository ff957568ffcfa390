"""Subject declarations: every seeded mistake ends in one line naming the file, the key and the reason; a good
declaration drives the framework's own functions without glue."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from harness.plugin.families import FAMILIES, family
from harness.subjects import declared
from harness.subjects.declaration import ROLES, DeclarationFileError, read_declaration_file
from harness.subjects.loading import load_subject
from harness.subjects.promises import (
    FreezeRuleNames,
    ProviderPromises,
    budget_env_var,
    freeze_rule_names,
    provider_promises,
)

SPLITTER = """
def split_grads(chunk_bytes, params, grads):
    return [([p], [g]) for p, g in zip(params, grads)] if chunk_bytes > 0 else []
"""
PROVIDER = """
def wrap_with_freeze(provider, args):
    def wrapped(pre_process=True, post_process=True, **kwargs):
        return provider(pre_process=pre_process, post_process=post_process, **kwargs)
    return wrapped
"""
GOOD = """
[subject]
source_root = "src"
adapter_package = "toyframe.megatron_utils"

[splitter]
function = "toyframe.megatron_utils.chunks:split_grads"
arguments = ["budget", "params", "grads"]

[provider]
factory = "toyframe.megatron_utils.provider:wrap_with_freeze"
freeze = "freeze_params_name_list"
train_only = "only_train_params_name_list"
"""


@pytest.fixture
def framework(tmp_path: Path) -> Path:
    package = tmp_path / "src" / "toyframe" / "megatron_utils"
    package.mkdir(parents=True)
    (tmp_path / "src" / "toyframe" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "chunks.py").write_text(SPLITTER)
    (package / "provider.py").write_text(PROVIDER)
    (package / "tensors.py").write_text(TENSOR_SPLITTERS)
    return tmp_path


def declare(framework: Path, text: str, name: str = "conformance.toml") -> Path:
    path = framework / name
    path.write_text(textwrap.dedent(text))
    return path


def one_line_error(path: Path, load: bool = False) -> str:
    with pytest.raises(DeclarationFileError) as caught:
        load_subject(str(path)) if load else read_declaration_file(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_declared_subject_calls_the_frameworks_own_functions(framework: Path) -> None:
    subject = load_subject(str(declare(framework, GOOD)))
    assert subject.split_into_chunks(["p"], ["g"], 8) == [(["p"], ["g"])]
    assert subject.split_into_chunks(["p"], ["g"], 0) == []
    assert subject.wrap_model_provider.__module__ == "toyframe.megatron_utils.provider"
    assert subject.ADAPTER_PACKAGE == "toyframe.megatron_utils"
    assert freeze_rule_names(subject) == FreezeRuleNames(
        "freeze_params_name_list", "only_train_params_name_list", "search"
    )
    assert subject.DECLARATION.roles == ("splitter", "provider")
    assert family("equivalence").missing_role(subject.DECLARATION) == "patch"
    assert family("import-side-effects").missing_role(subject.DECLARATION) is None
    assert not hasattr(subject, "install")


def test_the_declaration_can_live_in_pyproject(framework: Path) -> None:
    body = GOOD.replace("[subject]", "[tool.megatron-conformance.subject]")
    for table in ("splitter", "provider"):
        body = body.replace(f"[{table}]", f"[tool.megatron-conformance.{table}]")
    path = declare(framework, '[project]\nname = "toyframe"\n' + body, "pyproject.toml")
    declaration = read_declaration_file(path)
    assert declaration.roles == ("splitter", "provider")
    assert declaration.lines == 10


def test_the_line_count_is_reported(framework: Path) -> None:
    assert read_declaration_file(declare(framework, GOOD)).lines == 10


@pytest.mark.parametrize(
    ("edit", "key", "reason"),
    [
        (("[provider]", "[provder]"), "provder", "unknown key"),
        (('freeze = "', 'freez = "'), "provider.freez", "unknown key"),
        (('factory = "toyframe.megatron_utils.provider:wrap_with_freeze"\n', ""), "provider.factory", "missing"),
        (('source_root = "src"', 'source_root = "nowhere"'), "subject.source_root", "is not a directory"),
        (("arguments = [", 'arguments = ["budget", '), "splitter.arguments", "must order"),
        (("toyframe.megatron_utils.chunks:split_grads", "toyframe.megatron_utils.chunks"), "splitter.function", ""),
        (("[splitter]", '[budget]\nglobal = "CHUNK"\n\n[splitter]'), "budget", "without [patch]"),
        (('freeze = "', 'nested = "yes"\nfreeze = "'), "provider.nested", "must be true or false, not 'yes'"),
        (('freeze = "', 'inner_takes_kwargs = 1\nfreeze = "'), "provider.inner_takes_kwargs", "must be true or false"),
        (("[splitter]", '[allow]\nlog-messages = ["x*"]\n\n[splitter]'), "allow.log-messages", "unknown key"),
        (('source_root = "src"', 'source_root = "src"\nlabel = "  "'), "subject.label", "one non-empty line"),
        (('source_root = "src"', 'source_root = "src"\nlabel = "a\\nb"'), "subject.label", "one non-empty line"),
        (('source_root = "src"', 'source_root = "src"\nlabel = 3'), "subject.label", "non-empty string"),
        (("[splitter]", '[symbols_patch]\nmodule = "toyframe.x"\n\n[splitter]'), "symbols_patch.apply", "missing"),
        (
            ("[splitter]", '[symbols_patch]\nmodule = "toyframe.x"\napply = "a.b"\n\n[splitter]'),
            "symbols_patch.apply",
            "is not a name in its module",
        ),
        (
            ("[splitter]", '[symbols_patch]\nmodule = "t"\napply = "a"\narguments = 3\n\n[splitter]'),
            "symbols_patch.arguments",
            "must be a table",
        ),
        (
            ("[splitter]", '[symbols_patch]\nmodule = "t"\napply = "a"\ninstances = ["m:C.f"]\n\n[splitter]'),
            "symbols_patch.instances",
            "need model_argument",
        ),
    ],
)
def test_a_bad_declaration_is_one_line_naming_file_key_and_reason(
    framework: Path, edit: tuple[str, str], key: str, reason: str
) -> None:
    assert edit[0] in GOOD
    path = declare(framework, GOOD.replace(*edit, 1))
    message = one_line_error(path)
    assert message.startswith(f"{path}: key '{key}': ") and reason in message


SYMBOLS_PATCH = """
import megatron_fake


def enable(scale):
    megatron_fake.Router.gating = megatron_fake.scaled(scale)


def disable():
    del megatron_fake.Router.gating
"""


def forget_toyframe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's toyframe lives in its own folder: an earlier test's modules must not answer this one's imports."""
    for name in [name for name in sys.modules if name.split(".")[0] == "toyframe"]:
        monkeypatch.delitem(sys.modules, name)


@pytest.fixture
def fake_router(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``megatron_fake``, a stand-in Megatron with a ``Router`` class for a symbols patch to set ``gating`` on, and a
    fresh toyframe to import the patch from."""
    forget_toyframe(monkeypatch)
    fake = ModuleType("megatron_fake")
    fake.Router = type("Router", (), {})
    fake.scaled = lambda scale: ("gating scaled by", scale)
    monkeypatch.setitem(sys.modules, "megatron_fake", fake)
    return fake


def test_the_symbols_patch_is_applied_with_its_arguments_and_undone(framework: Path, fake_router: ModuleType) -> None:
    fake = fake_router
    (framework / "src" / "toyframe" / "megatron_utils" / "router.py").write_text(SYMBOLS_PATCH)
    text = GOOD + (
        '\n[symbols_patch]\nmodule = "toyframe.megatron_utils.router"\napply = "enable"\nundo = "disable"\n'
        "arguments = { scale = 2 }\n"
    )
    subject = load_subject(str(declare(framework, text)))
    subject.apply_replacements()
    assert fake.Router.gating == ("gating scaled by", 2)
    subject.undo_replacements()
    assert "gating" not in vars(fake.Router)


SYMBOLS_CONTEXT = """
import contextlib

import megatron_fake


@contextlib.contextmanager
def gating_scaled(scale):
    megatron_fake.Router.gating = megatron_fake.scaled(scale)
    yield
    del megatron_fake.Router.gating
"""
SYMBOLS_AT_IMPORT = """
import megatron_fake

megatron_fake.Router.gating = megatron_fake.scaled(3)


def disable():
    del megatron_fake.Router.gating
"""


@pytest.mark.parametrize(
    ("source", "table"),
    [
        (SYMBOLS_CONTEXT, 'applied = "context"\ncontext = "gating_scaled"\narguments = { scale = 3 }\n'),
        (SYMBOLS_AT_IMPORT, 'applied = "import"\nundo = "disable"\n'),
    ],
    ids=["context", "import"],
)
def test_a_symbols_patch_applied_by_a_context_or_at_import_is_applied_each_time_and_undone(
    framework: Path, fake_router: ModuleType, source: str, table: str
) -> None:
    """Loading the subject applies nothing; each apply enters the context (or imports the module afresh), and undo
    leaves it (or calls the declared undo)."""
    fake = fake_router
    (framework / "src" / "toyframe" / "megatron_utils" / "router.py").write_text(source)
    text = GOOD + f'\n[symbols_patch]\nmodule = "toyframe.megatron_utils.router"\n{table}'
    subject = load_subject(str(declare(framework, text)))
    assert "gating" not in vars(fake.Router)
    for _ in range(2):
        subject.apply_replacements()
        assert fake.Router.gating == ("gating scaled by", 3)
        subject.undo_replacements()
        assert "gating" not in vars(fake.Router)


@pytest.mark.parametrize(
    ("table", "key", "reason"),
    [
        ('applied = "context"\n', "symbols_patch.context", 'applied = "context" names the context function'),
        ('applied = "import"\napply = "enable"\n', "symbols_patch.apply", 'applied = "import" has no apply'),
        ('applied = "context"\ncontext = "c"\nundo = "u"\n', "symbols_patch.undo", "by leaving the context"),
        ('applied = "import"\narguments = { a = 1 }\n', "symbols_patch.arguments", "calls nothing to pass it to"),
        ('applied = "imported"\n', "symbols_patch.applied", "must be one of import, call, context"),
    ],
)
def test_a_wrong_symbols_patch_form_is_one_line(framework: Path, table: str, key: str, reason: str) -> None:
    path = declare(framework, GOOD + f'\n[symbols_patch]\nmodule = "toyframe.megatron_utils.router"\n{table}')
    message = one_line_error(path)
    assert message.startswith(f"{path}: key '{key}': ") and reason in message, message


def test_a_symbols_patch_naming_no_function_is_one_line(framework: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forget_toyframe(monkeypatch)
    (framework / "src" / "toyframe" / "megatron_utils" / "router.py").write_text("")
    text = GOOD + '\n[symbols_patch]\nmodule = "toyframe.megatron_utils.router"\napply = "enable"\n'
    message = one_line_error(declare(framework, text), load=True)
    assert "key 'symbols_patch.apply'" in message and "has no function 'enable'" in message


def test_a_patch_needs_a_budget(framework: Path) -> None:
    text = GOOD + '\n[patch]\nmodule = "toyframe.megatron_utils.patch"\napplied = "import"\n'
    message = one_line_error(declare(framework, text))
    assert "key 'budget': missing" in message


@pytest.mark.parametrize(
    ("edit", "key", "reason"),
    [
        (("chunks:split_grads", "chunks:split_gradz"), "splitter.function", "has no attribute 'split_gradz'"),
        (("megatron_utils.chunks:", "megatron_utils.chunkz:"), "splitter.function", "no module"),
        (("provider:wrap_with_freeze", "provider:wrap_with_frieze"), "provider.factory", "no attribute"),
        (
            ('adapter_package = "toyframe.megatron_utils"', 'adapter_package = "toyframe.mcore"'),
            "subject.adapter_package",
            "no package",
        ),
    ],
)
def test_a_wrong_dotted_name_is_one_line_naming_file_key_and_reason(
    framework: Path, edit: tuple[str, str], key: str, reason: str
) -> None:
    path = declare(framework, GOOD.replace(*edit))
    message = one_line_error(path, load=True)
    assert message.startswith(f"{path}: key '{key}': ") and reason in message


def test_a_budget_only_in_the_environment_is_refused_with_what_to_name(framework: Path) -> None:
    text = GOOD + '\n[patch]\nmodule = "toyframe.megatron_utils.patch"\napplied = "import"\n'
    text += '\n[budget]\nenv = "TOYFRAME_CHUNK_BYTES"\n'
    message = one_line_error(declare(framework, text))
    assert "key 'budget': names neither global nor argument" in message and "budget.global" in message


SYMBOL = "megatron.core.distributed.finalize_model_grads:_get_main_grad_attr"
REPLACED = "megatron.core.distributed.finalize_model_grads:_allreduce_non_tensor_model_parallel_grads"


@pytest.mark.parametrize(
    ("symbols", "key", "reason"),
    [
        ({SYMBOL: "uses"}, SYMBOL, "'uses' is not a usage: expected one of imports, calls, reads, replaces, relies"),
        ({SYMBOL: "call"}, SYMBOL, "'call' is not a usage"),
        ({SYMBOL: "calls optional"}, SYMBOL, "'calls optional' is not a usage"),
        ({SYMBOL: "replaces"}, SYMBOL, "'replaces' names no replacement: declare [symbols_patch]"),
        ({SYMBOL: "calls with split_into_chunks"}, SYMBOL, "'with <subject name>' goes with 'replaces'"),
        ({"megatron.core.distributed.finalize_model_grads._get_main_grad_attr": "calls"}, None, "module:qualname"),
        (
            {REPLACED: "replaces with allreduce_grads"},
            REPLACED,
            "a declared subject has no 'allreduce_grads'; its roles expose split_into_chunks, wrap_model_provider",
        ),
    ],
)
def test_a_wrong_megatron_symbols_entry_is_refused_at_load_in_one_line(
    framework: Path, symbols: dict[str, str], key: str | None, reason: str
) -> None:
    table = "".join(f'"{symbol}" = "{usage}"\n' for symbol, usage in symbols.items())
    path = declare(framework, GOOD + "\n[megatron_symbols]\n" + table)
    message = one_line_error(path)
    (symbol,) = symbols
    assert message.startswith(f"{path}: key 'megatron_symbols.{key or symbol}': "), message
    assert reason in message, message


def test_good_megatron_symbols_load(framework: Path) -> None:
    symbols = {SYMBOL: "calls, optional", REPLACED.replace("non_tensor", "tensor"): "replaces with split_into_chunks"}
    table = "".join(f'"{symbol}" = "{usage}"\n' for symbol, usage in symbols.items())
    declaration = read_declaration_file(declare(framework, GOOD + "\n[megatron_symbols]\n" + table))
    assert declaration.megatron_symbols == symbols


def test_log_records_may_be_allowed_by_message(framework: Path) -> None:
    text = GOOD.replace("[splitter]", '[allow]\nlog-message = ["toyframe: chunked all-reduce*"]\n\n[splitter]')
    subject = load_subject(str(declare(framework, text)))
    assert subject.IMPORT_SIDE_EFFECTS_ALLOWED == {"log-message": ["toyframe: chunked all-reduce*"]}


def test_the_label_names_the_adapter_package_and_the_file_below_the_source_root(framework: Path) -> None:
    assert read_declaration_file(declare(framework, GOOD)).label == "toyframe.megatron_utils (../conformance.toml)"
    inside = GOOD.replace('source_root = "src"', 'source_root = "."')
    (framework / "ci").mkdir()
    path = declare(framework, inside.replace('source_root = "."', 'source_root = ".."'), "ci/megatron-conformance.toml")
    assert read_declaration_file(path).label == "toyframe.megatron_utils (ci/megatron-conformance.toml)"
    named = GOOD.replace('source_root = "src"', 'source_root = "src"\nlabel = "toyframe after the upgrade"')
    assert read_declaration_file(declare(framework, named)).label == "toyframe after the upgrade"


def test_provider_promises_are_false_unless_declared_and_true_for_module_subjects(framework: Path) -> None:
    subject = load_subject(str(declare(framework, GOOD)))
    assert (subject.PROVIDER_INNER_TAKES_KWARGS, subject.PROVIDER_NESTED) == (False, False)
    assert provider_promises(subject) == ProviderPromises(inner_takes_kwargs=False, nested=False)
    promised = GOOD.replace('freeze = "', 'inner_takes_kwargs = true\nnested = true\nfreeze = "')
    subject = load_subject(str(declare(framework, promised, "promised.toml")))
    assert (subject.PROVIDER_INNER_TAKES_KWARGS, subject.PROVIDER_NESTED) == (True, True)
    assert subject.DECLARATION.provider_flag("nested") and subject.DECLARATION.provider["freeze"]
    assert provider_promises(ModuleType("module_subject")) == ProviderPromises(True, True)


def test_the_budget_variable_is_exposed_for_the_import_family(framework: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``budget.env`` becomes the subject's ``BUDGET_ENV_VAR``, which the import-side-effects family lists instead of
    reporting; the reference subject names its own the same way. (The patch is not captured here: that needs
    Megatron.)"""
    monkeypatch.setattr(declared, "DeclaredPatch", lambda declaration, subject: None)
    text = GOOD + '\n[budget]\nglobal = "CHUNK"\nenv = "TOYFRAME_CHUNK_BYTES"\n'
    text += '\n[patch]\nmodule = "toyframe.megatron_utils.patch"\napplied = "import"\n'
    subject = load_subject(str(declare(framework, text)))
    assert subject.BUDGET_ENV_VAR == "TOYFRAME_CHUNK_BYTES" == budget_env_var(subject)
    assert budget_env_var(load_subject(str(declare(framework, GOOD, "no_budget.toml")))) is None
    module_subject = ModuleType("module_subject")
    module_subject.BUDGET_ENV_VAR = "MEGATRON_CONFORMANCE_ALLREDUCE_CHUNK_BYTES"  # as the reference subject does
    assert budget_env_var(module_subject) == "MEGATRON_CONFORMANCE_ALLREDUCE_CHUNK_BYTES"


TENSOR_SPLITTERS = """
def by_grads(grads, budget):
    return [[g] for g in grads]


def by_indices(tensors, budget, element_size=None):
    return [[i] for i in range(len(tensors))]


def copies(grads, budget):
    return [[list(g)] for g in grads]
"""


@pytest.mark.parametrize("function, returns", [("by_grads", "grads"), ("by_indices", "indices")])
def test_a_splitter_that_takes_no_params_is_paired_back_with_them(framework: Path, function: str, returns: str) -> None:
    text = GOOD.replace("toyframe.megatron_utils.chunks:split_grads", f"toyframe.megatron_utils.tensors:{function}")
    text = text.replace(
        'arguments = ["budget", "params", "grads"]', f'arguments = ["grads", "budget"]\nreturns = "{returns}"'
    )
    subject = load_subject(str(declare(framework, text)))
    shared = object()
    grads = ["g0", shared, shared]
    assert subject.split_into_chunks(["p0", "p1", "p2"], grads, 8) == [
        (["p0"], ["g0"]),
        (["p1"], [shared]),
        (["p2"], [shared]),
    ]


def test_a_chunk_of_copies_pairs_with_no_param(framework: Path) -> None:
    """A splitter that returns copies of the grads has nothing to pair: the case then names the chunk."""
    text = GOOD.replace("toyframe.megatron_utils.chunks:split_grads", "toyframe.megatron_utils.tensors:copies")
    text = text.replace('arguments = ["budget", "params", "grads"]', 'arguments = ["grads", "budget"]')
    subject = load_subject(str(declare(framework, text)))
    assert subject.split_into_chunks(["p0"], ["ab"], 8) == [([None], [["a", "b"]])]


@pytest.mark.parametrize(
    ("arguments", "returns", "reason"),
    [
        ('["grads"]', None, "must order"),
        ('["grads", "budget"]', '"pairs"', "'pairs' needs a splitter that takes the params"),
        ('["params", "grads", "budget"]', '"chunks"', "must be one of pairs, grads, indices"),
    ],
)
def test_a_splitter_shape_that_cannot_be_used_is_one_line(
    framework: Path, arguments: str, returns: str | None, reason: str
) -> None:
    text = GOOD.replace('arguments = ["budget", "params", "grads"]', f"arguments = {arguments}")
    if returns:
        text = text.replace(f"arguments = {arguments}", f"arguments = {arguments}\nreturns = {returns}")
    assert reason in one_line_error(declare(framework, text))


def test_every_family_role_is_a_declaration_table() -> None:
    """A family gated on a role the declaration format does not have could never run on a declared subject."""
    roles = [f.role for f in FAMILIES if f.role]
    assert sorted(roles) == sorted(ROLES)


def test_several_subjects_in_the_environment_are_split_for_the_target_session_and_refused_by_one_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.formats.environment import SUBJECT_ENV_VAR
    from harness.subjects.loading import SubjectError, subject_spec, subject_specs

    monkeypatch.setenv(SUBJECT_ENV_VAR, "a.toml, b.py,")
    assert subject_specs() == ["a.toml", "b.py"]
    with pytest.raises(SubjectError, match="names 2 subjects"):
        subject_spec()
    assert subject_spec("c.py") == "c.py"
    monkeypatch.setenv(SUBJECT_ENV_VAR, "")
    assert subject_spec() == "harness.reference"


SCALE = '\n[scale]\nmodels = [{ preset = "llama-70b", tp = 8, sp = true }]\n'


@pytest.mark.parametrize(
    ("table", "key", "reason"),
    [
        ("\n[scale]\nbudget = 4\n", "scale.models", "missing"),
        ("\n[scale]\nmodels = []\n", "scale.models", "at least one model"),
        (SCALE.replace("llama-70b", "llama-7b"), "scale.models[0].preset", "no preset 'llama-7b'"),
        (SCALE.replace("tp = 8", "tp = 0"), "scale.models[0].tp", "positive whole number"),
        (SCALE.replace("sp = true", "sp = 1"), "scale.models[0].sp", "true or false"),
        (SCALE.replace("tp = 8", "tensor = 8"), "scale.models[0].tensor", "unknown key"),
        (
            SCALE.replace('preset = "llama-70b"', 'preset = "llama-70b", config = "a.yaml"'),
            "scale.models[0]",
            "exactly one",
        ),
        (SCALE.replace('preset = "llama-70b"', 'config = "nowhere.yaml"'), "scale.models[0].config", "is not a file"),
        (SCALE.replace("tp = 8", 'tp = 8, main_grad_dtype = "fp8"'), "scale.models[0].main_grad_dtype", "one of"),
        (SCALE + "budget = -1\n", "scale.budget", "positive whole number of bytes"),
    ],
)
def test_a_bad_scale_table_is_one_line_naming_its_key(framework: Path, table: str, key: str, reason: str) -> None:
    path = declare(framework, GOOD + table)
    with pytest.raises(DeclarationFileError) as caught:
        read_declaration_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: key '{key}': ") and reason in message and "\n" not in message


def test_a_frameworks_own_config_file_becomes_the_models_fields(framework: Path) -> None:
    (framework / "args.json").write_text(json.dumps({"num_layers": 4, "hidden_size": 64, "vocab_size": 1000}))
    (framework / "bare.yaml").write_text("num_layers: 4\n")
    table = '\n[scale]\nmodels = [{ config = "args.json", tp = 2, sp = true }]\nbudget = 1048576\n'
    declared = read_declaration_file(declare(framework, GOOD + table)).scale
    assert declared == {
        "models": [
            {"tp": 2, "sp": True, "vocab_size": 1000, "fields": {"num_layers": 4, "hidden_size": 64}, "name": "args"}
        ],
        "budget": 1048576,
    }
    with pytest.raises(DeclarationFileError, match=r"scale.models\[0\].vocab_size'.* is needed"):
        read_declaration_file(declare(framework, GOOD + table.replace("args.json", "bare.yaml")))


def test_a_copy_names_its_release_beside_the_symbol_or_in_a_table_of_its_own(framework: Path) -> None:
    copy = REPLACED.replace("non_tensor", "tensor")
    beside = f'"{copy}" = {{ usage = "replaces with split_into_chunks", copied_from = "0.13.1" }}\n'
    declaration = read_declaration_file(declare(framework, GOOD + "\n[megatron_symbols]\n" + beside))
    assert declaration.megatron_symbols == {copy: "replaces with split_into_chunks"}
    assert declaration.copied_from == {copy: "0.13.1"}
    own = f'"{copy}" = "replaces with split_into_chunks"\n\n[copied_from]\n"{copy}" = "0.15.0rc4"\n'
    assert read_declaration_file(declare(framework, GOOD + "\n[megatron_symbols]\n" + own)).copied_from == {
        copy: "0.15.0rc4"
    }


@pytest.mark.parametrize(
    ("table", "key", "reason"),
    [
        (f'"{SYMBOL}" = {{ usage = "calls", copied_from = "0.13.1" }}\n', f"copied_from.{SYMBOL}", "replaces"),
        (
            f'"{SYMBOL}" = {{ usage = "replaces with split_into_chunks", copied_from = "latest" }}\n',
            f"copied_from.{SYMBOL}",
            "is not a megatron-core release",
        ),
        (f'"{SYMBOL}" = {{ usage = "calls", copied = "0.13.1" }}\n', f"megatron_symbols.{SYMBOL}.copied", "unknown"),
        (f'"{SYMBOL}" = "calls"\n\n[copied_from]\n"{REPLACED}" = "0.13.1"\n', f"copied_from.{REPLACED}", "replaces"),
    ],
)
def test_a_wrong_copy_release_is_one_line_naming_its_key(framework: Path, table: str, key: str, reason: str) -> None:
    path = declare(framework, GOOD + "\n[megatron_symbols]\n" + table)
    message = one_line_error(path)
    assert message.startswith(f"{path}: key '{key}': ") and reason in message, message
