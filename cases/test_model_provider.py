"""Contract: model-provider wrapping. The subject's ``wrap_model_provider`` under each of the target's call shapes.

Megatron's training loop calls the model provider with keywords that change between releases (the target's
``provider.calls`` in matrix.yaml). Mandatory, because ``get_model`` does it: under every call shape, an inner
provider that names the keywords this target passes (or takes ``**kwargs``, where the subject says its inner providers
do) receives them through the wrapper, wrapped once (twice where the subject says it nests wrappers), and the model
returned has the freeze rules applied (``get_model`` wraps it in DDP at once, which builds grad buffers for the params
that require grad then). A real ``GPTModel`` shows the values reach the model Megatron builds.

Freeze rules: ``args.freeze_patterns`` are regexes of parameter names to freeze, ``args.train_only_patterns`` regexes
of the only parameters to train; a pattern applies to a name when ``re.search`` finds it in the name. A declared
subject names its own ``args`` attributes and match mode (``[provider]``), and the wrapper must read each one. The
rules are on ``args`` when the wrapper is made, as a framework parses its args and then wraps.

One red never hides another: the freeze rules are checked under every call shape the wrapper survives (and under
the bare ``pre_process``/``post_process`` call when it survives none). Advisory (reported apart unless the subject is
strict), since Megatron does none of it: inner providers beyond the promise, nested wrappers unless promised, rules
set after wrapping, positional-only inner parameters, values the caller did not pass reaching the inner provider, and
the inner provider's error let out as the same object. Call shapes only other targets make (and shapes a declaration
says its models never meet) are a forecast: reported, never a red on this target, even for a strict subject.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.contracts.model_provider import (
    GPT_PARAMETER_NAMES,
    GPTProvider,
    InnerProvider,
    ProviderSpec,
    caller_value,
    expected_frozen,
    freeze_mismatch,
    freeze_patterns,
    parameter_tree,
    provider_specs,
    tiny_gpt_config,
)
from harness.plugin.failure import contract_failure
from harness.plugin.families import family
from harness.plugin.session_state import configured_matrix, configured_target, declaration_of
from harness.subjects.promises import FreezeRuleNames, freeze_rule_names, provider_promises, required_call_shapes
from harness.targets.matrix import Target
from harness.targets.provider_shapes import (
    derive_calls,
    installed_training_file,
    process_group_parameter,
    shape_mismatches,
)

FAMILY = family("model-provider")
pytestmark = FAMILY.mark()

Rules = tuple[list[str] | None, list[str] | None]
FORECAST = pytest.mark.advisory(forecast=True)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One real-model case per call shape of the target, so a red names its shape in the test id too; a shape the
    declared subject's models never meet is advisory."""
    if "call_shape" in metafunc.fixturenames:
        target = configured_target(metafunc.config)
        declaration = declaration_of(metafunc.config)
        named = declaration.provider.get("call_shapes") if declaration else None
        metafunc.parametrize(
            "call_shape",
            [
                pytest.param(
                    shape, marks=[] if named is None or shape in named else [pytest.mark.advisory(forecast=True)]
                )
                for shape in target.provider.calls
            ],
        )


def wrap(subject: ModuleType, provider: Callable[..., Any], args_per_level: list[argparse.Namespace]) -> Any:
    """``provider`` wrapped by the subject once per entry of ``args_per_level``, innermost first."""
    for args in args_per_level:
        provider = subject.wrap_model_provider(provider, args)
    return provider


def promised_inner_providers(
    subject: ModuleType, shapes: dict[str, Any], failing: bool = False
) -> st.SearchStrategy[ProviderSpec]:
    """Inner providers that name every keyword of ``shapes`` (Megatron's call on this target), or, where the subject
    promises it, take ``**kwargs`` instead."""
    takes_kwargs = provider_promises(subject).inner_takes_kwargs
    keywords = sorted({k for keywords in shapes.values() for k in keywords})
    return provider_specs(
        failing=failing, positional_only=False, var_keyword=None if takes_kwargs else False, names=keywords
    )


def promised_depths(subject: ModuleType) -> st.SearchStrategy[int]:
    """Wrapped once, as Megatron's ``get_model`` receives it, or twice where the subject says it nests wrappers."""
    return st.integers(1, 2 if provider_promises(subject).nested else 1)


def skip_when_all_promised(subject: ModuleType, target: Target) -> None:
    """Where the subject promises both, the mandatory case already draws every inner provider and depth."""
    promises = provider_promises(subject)
    if promises.inner_takes_kwargs and promises.nested:
        pytest.skip(
            contract_failure(
                target,
                FAMILY.name,
                "beyond the promise",
                "the subject promises **kwargs inner providers and nested wrappers: the mandatory case covers them",
            )
        )


class LauncherArgs(argparse.Namespace):
    """Launcher args as they are when the wrapper is made: the freeze options exist but are not set yet. Records the
    attributes read, so a declared rule name the wrapper never reads is found."""

    def __init__(self, names: FreezeRuleNames) -> None:
        super().__init__(**{name: None for name in (names.freeze, names.train_only) if name})
        object.__setattr__(self, "_names", names)
        object.__setattr__(self, "_read", set())

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_"):
            object.__getattribute__(self, "_read").add(name)
        elif name == "__dict__":
            # ``vars(args)`` or ``args.__dict__[...]`` can read any rule: no name is then known to be unread.
            object.__getattribute__(self, "_read").update(object.__getattribute__(self, "__dict__"))
        return object.__getattribute__(self, name)

    def set_rules(self, freeze: list[str] | None, train_only: list[str] | None) -> None:
        names = object.__getattribute__(self, "_names")
        for name, value in ((names.freeze, freeze), (names.train_only, train_only)):
            if name:
                object.__setattr__(self, name, value)

    def read(self) -> set[str]:
        return set(object.__getattribute__(self, "_read"))


def set_rules(args_per_level: list[LauncherArgs], rules: list[Rules]) -> None:
    for args, (freeze, train_only) in zip(args_per_level, rules, strict=True):
        args.set_rules(freeze, train_only)


def unset_rules(subject: ModuleType) -> LauncherArgs:
    return LauncherArgs(freeze_rule_names(subject))


def draw_rules(data: st.DataObject, names: FreezeRuleNames) -> Rules:
    """A ``(freeze, train_only)`` pair, ``None`` for a rule the subject does not declare."""
    freeze = data.draw(freeze_patterns(), label="freeze") if names.freeze else None
    train_only = data.draw(freeze_patterns(), label="train_only") if names.train_only else None
    return freeze, train_only


def call_failure(shape: str, passed: dict[str, Any], err: Exception, reached: bool) -> str:
    """Why a call that had to succeed raised, ``call shape '<shape>': <keyword>: <why>``: naming the keyword when the
    error names one the caller passed."""
    quoted = [name for name in re.findall(r"'(\w+)'", str(err)) if name in passed]
    what = f"keyword '{quoted[0]}'" if quoted else f"keywords {sorted(passed)}"
    where = "after the inner provider ran" if reached else "before the inner provider ran"
    return f"call shape '{shape}': {what}: calling the wrapped provider raised {err!r} {where}"


def draw_caller_values(data: st.DataObject, target: Target) -> dict[str, Any]:
    """A value for each keyword any of the target's call shapes passes; every shape passes the same ones."""
    keywords = sorted({k for keywords in target.provider.calls.values() for k in keywords})
    return {k: data.draw(caller_value(k), label=k) for k in keywords}


def test_matrix_records_the_installed_process_group_keyword(target: Target) -> None:
    from megatron.core.models.gpt.gpt_model import GPTModel

    derived = process_group_parameter(GPTModel.__init__)
    installed = derived[0] if derived else None
    recorded = target.provider.process_group_keyword
    takes = f"{installed!r} ({derived[1].__qualname__})" if derived else "no process-group parameter"
    assert recorded == installed, contract_failure(
        target,
        FAMILY.name,
        "process_group_keyword",
        f"the matrix records {recorded!r} but the installed GPTModel.__init__ takes {takes}: the matrix entry is stale",
    )


def test_matrix_records_the_call_shapes_megatron_makes(target: Target) -> None:
    training = installed_training_file()
    if training is None:
        pytest.skip(
            contract_failure(
                target,
                FAMILY.name,
                "calls",
                "the installed megatron-core ships no training loop: matrix.yaml is the source",
            )
        )
    calls = derive_calls(training.read_text(), str(training))
    problems = shape_mismatches(calls, target.provider.calls, training)
    assert not problems, contract_failure(target, FAMILY.name, "calls: the matrix entry is stale", problems)


@given(data=st.data())
def test_keywords_reach_the_inner_provider(subject: ModuleType, target: Target, data: st.DataObject) -> None:
    """Inner providers as the subject's own are (naming the keywords this target passes, or taking ``**kwargs`` where
    the subject says its inner providers do), wrapped as often as the subject says it wraps."""
    shapes = required_call_shapes(subject, target.provider.calls)
    spec = data.draw(promised_inner_providers(subject, shapes), label="spec")
    depth = data.draw(promised_depths(subject), label="depth")
    keywords_reach_the_inner_provider(subject, target, spec, depth, data, shapes)


@pytest.mark.advisory
@given(spec=provider_specs(positional_only=False), depth=st.integers(1, 2), data=st.data())
def test_keywords_reach_inner_providers_beyond_the_promise(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    """Any inner provider (one that names only some keywords, or takes ``**kwargs``), wrapped once or twice: what
    the subject does not promise (``provider.inner_takes_kwargs``, ``provider.nested``) is advisory."""
    skip_when_all_promised(subject, target)
    shapes = required_call_shapes(subject, target.provider.calls)
    keywords_reach_the_inner_provider(subject, target, spec, depth, data, shapes)


@pytest.mark.advisory
@given(spec=provider_specs(positional_only=False), depth=st.integers(1, 2), data=st.data())
def test_no_keyword_the_caller_did_not_pass_reaches_the_inner_provider(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    shapes = required_call_shapes(subject, target.provider.calls)
    keywords_reach_the_inner_provider(subject, target, spec, depth, data, shapes, invented=True)


@pytest.mark.advisory
@given(spec=provider_specs(positional_only=True), depth=st.integers(1, 2), data=st.data())
def test_keywords_reach_positional_only_inner_parameters(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    shapes = required_call_shapes(subject, target.provider.calls)
    keywords_reach_the_inner_provider(subject, target, spec, depth, data, shapes)


@FORECAST
@given(spec=provider_specs(positional_only=False), data=st.data())
def test_keywords_of_call_shapes_the_subject_does_not_meet_here(
    subject: ModuleType, target: Target, spec: ProviderSpec, data: st.DataObject, pytestconfig: pytest.Config
) -> None:
    """Shapes only other targets make (what the next Megatron will pass), and this target's shapes the declared
    subject's models never meet."""
    matrix = configured_matrix(pytestconfig)
    required = required_call_shapes(subject, target.provider.calls)
    own = set(map(tuple, required.values()))
    others = {
        f"{other.session}: {shape}": keywords
        for other in matrix.targets
        for shape, keywords in other.provider.calls.items()
        if tuple(keywords) not in own
    }
    if others:
        keywords_reach_the_inner_provider(subject, target, spec, 1, data, others)


def keywords_reach_the_inner_provider(
    subject: ModuleType,
    target: Target,
    spec: ProviderSpec,
    depth: int,
    data: st.DataObject,
    shapes: dict[str, Any],
    invented: bool = False,
) -> None:
    keywords_used = sorted({k for keywords in shapes.values() for k in keywords})
    values = {k: data.draw(caller_value(k), label=k) for k in keywords_used}
    inner = InnerProvider(spec, make_model=lambda: parameter_tree(GPT_PARAMETER_NAMES[:2]))
    wrapped = wrap(subject, inner.callable, [unset_rules(subject) for _ in range(depth)])
    problems = []
    for shape, keywords in shapes.items():
        passed = {k: values[k] for k in keywords}
        inner.reset()
        try:
            wrapped(**passed)
        except Exception as err:
            problems.append(call_failure(shape, passed, err, bool(inner.receptions)))
            continue
        if len(inner.receptions) != 1:
            problems.append(
                f"call shape '{shape}': keywords: one call reached the inner provider {len(inner.receptions)} times"
            )
            continue
        problems.extend(
            f"call shape '{shape}': keyword '{keyword}': {problem}"
            for keyword, problem in inner.reception_problems(passed, inner.receptions[0], invented)
        )
    assert not problems, contract_failure(
        target,
        FAMILY.name,
        f"keywords through the wrapper (inner provider: {spec.describe()}, wrapped {depth}x)",
        problems,
    )


@given(data=st.data())
def test_returns_the_inner_model_with_freeze_rules_applied(
    subject: ModuleType, target: Target, data: st.DataObject
) -> None:
    spec = data.draw(promised_inner_providers(subject, required_call_shapes(subject, target.provider.calls)))
    returns_the_inner_model_with_freeze_rules_applied(
        subject, target, spec, data.draw(promised_depths(subject), label="depth"), data
    )


@pytest.mark.advisory
@given(spec=provider_specs(positional_only=False), data=st.data())
def test_freeze_rules_of_nested_wrappers(
    subject: ModuleType, target: Target, spec: ProviderSpec, data: st.DataObject
) -> None:
    """The wrapper applied twice freezes the union of both levels' rules: advisory unless ``provider.nested``."""
    skip_when_all_promised(subject, target)
    returns_the_inner_model_with_freeze_rules_applied(subject, target, spec, 2, data)


@pytest.mark.advisory
@given(spec=provider_specs(positional_only=False), data=st.data())
def test_freeze_rules_set_after_wrapping_still_apply(
    subject: ModuleType, target: Target, spec: ProviderSpec, data: st.DataObject
) -> None:
    """Rules set on ``args`` after the wrapper was made apply when the model is built. Advisory: a framework parses
    its args before it wraps its provider, and nothing in Megatron sets them later, so a wrapper that reads them
    when it is made is as correct."""
    returns_the_inner_model_with_freeze_rules_applied(subject, target, spec, 1, data, rules_first=False)


def returns_the_inner_model_with_freeze_rules_applied(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject, rules_first: bool = True
) -> None:
    """With ``rules_first``, each level's rules are on its ``args`` before that level wraps (as a framework parses
    its args, then wraps); otherwise they are set after every level has wrapped."""
    values = draw_caller_values(data, target)
    names = freeze_rule_names(subject)
    rules: list[Rules] = [draw_rules(data, names) for _ in range(depth)]
    inner = InnerProvider(spec, make_model=lambda: parameter_tree(GPT_PARAMETER_NAMES))
    args_per_level = [unset_rules(subject) for _ in range(depth)]
    if rules_first:
        set_rules(args_per_level, rules)
    wrapped = wrap(subject, inner.callable, args_per_level)
    if not rules_first:
        set_rules(args_per_level, rules)
    frozen = expected_frozen(GPT_PARAMETER_NAMES, rules, names.match)
    described = f"rules {rules} (innermost first); inner provider {spec.describe()}"
    required = required_call_shapes(subject, target.provider.calls)
    shapes = {shape: {k: values[k] for k in keywords} for shape, keywords in required.items()}
    checked, raised = 0, {}
    for shape, passed in [*shapes.items(), (BARE_CALL, {"pre_process": True, "post_process": True})]:
        if shape == BARE_CALL and checked:
            break
        inner.reset()
        try:
            model = wrapped(**passed)
        except Exception as err:
            # Why the call raised is the keywords case's red; the freeze rules are judged where the call succeeds.
            raised[shape] = call_failure(shape, passed, err, bool(inner.receptions))
            continue
        checked += 1
        assert inner.returned and model is inner.returned[-1], contract_failure(
            target,
            FAMILY.name,
            f"call shape '{shape}': return value",
            f"the wrapper returned {model!r}, not the inner provider's model",
        )
        mismatch = freeze_mismatch(model, frozen)
        assert mismatch is None, contract_failure(
            target,
            FAMILY.name,
            f"call shape '{shape}': freeze rules",
            f"{len(frozen)} of {len(GPT_PARAMETER_NAMES)} parameters must be frozen; {mismatch}; {described}",
        )
    assert checked, contract_failure(
        target, FAMILY.name, "freeze rules cannot be judged: the wrapper raised under every call", list(raised.values())
    )


BARE_CALL = "pre_process/post_process only"


def test_declared_rule_names_are_read(subject: ModuleType, target: Target) -> None:
    names = freeze_rule_names(subject)
    args = unset_rules(subject)
    wrapped = subject.wrap_model_provider(
        lambda pre_process=True, post_process=True, **_: parameter_tree(GPT_PARAMETER_NAMES), args
    )
    args.set_rules([r"^embedding\."], [r"decoder"])
    with contextlib.suppress(Exception):
        wrapped(pre_process=True, post_process=True)
    read = args.read()
    declaration = getattr(subject, "DECLARATION", None)
    for role, name in (("freeze", names.freeze), ("train_only", names.train_only)):
        where = f"{declaration.path}: key 'provider.{role}'" if declaration else f"the subject protocol's {role} rule"
        assert not name or name in read, contract_failure(
            target, FAMILY.name, f"{where}: the wrapper never reads args.{name}", f"it read {sorted(read) or 'nothing'}"
        )


@pytest.mark.advisory
@given(spec=provider_specs(failing=True, positional_only=False), depth=st.integers(1, 2), data=st.data())
def test_inner_provider_errors_propagate_unchanged(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    """Advisory: ``get_model`` lets whatever the provider raises out as it is, so which exception object a wrapper
    lets out changes nothing Megatron does; it only changes what the user reads."""
    inner_provider_errors_propagate_unchanged(subject, target, spec, depth, data)


def inner_provider_errors_propagate_unchanged(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    values = draw_caller_values(data, target)
    inner = InnerProvider(spec, make_model=lambda: parameter_tree(GPT_PARAMETER_NAMES[:2]))
    wrapped = wrap(subject, inner.callable, [unset_rules(subject) for _ in range(depth)])
    required = required_call_shapes(subject, target.provider.calls)
    shapes = {shape: {k: values[k] for k in keywords} for shape, keywords in required.items()}
    reached, unreached = 0, []
    for shape, passed in [*shapes.items(), (BARE_CALL, {"pre_process": True, "post_process": True})]:
        if shape == BARE_CALL and reached:
            break
        inner.reset()
        try:
            returned = wrapped(**passed)
        except Exception as err:
            caught = err
        else:
            raise AssertionError(
                contract_failure(
                    target,
                    FAMILY.name,
                    f"call shape '{shape}': inner provider error",
                    f"the inner raised, the wrapper returned {returned!r}",
                )
            )
        if not inner.raised:
            # The wrapper raised before the inner ran: the keywords case's red; errors are judged where it reaches.
            unreached.append(call_failure(shape, passed, caught, False))
            continue
        reached += 1
        assert len(inner.raised) == 1 and caught is inner.raised[0], contract_failure(
            target,
            FAMILY.name,
            f"call shape '{shape}': inner provider error",
            f"the inner provider raised {inner.raised!r}, the wrapper let out {caught!r}: it must propagate the "
            f"same exception object; inner provider {spec.describe()}, wrapped {depth}x",
        )
    assert reached, contract_failure(
        target, FAMILY.name, "inner provider errors cannot be judged: no call reached the inner provider", unreached
    )


@pytest.fixture(scope="module")
def world_of_one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Megatron's parallel state on a one-rank gloo group in this process, torn down after the module.

    ``GPTModel`` reads its TP/PP/CP/embedding groups from ``parallel_state`` while it builds, so even a one-rank
    model needs them; a FileStore in a temporary directory needs no free port. No CUDA workaround is needed: CPU
    initialisation and learned absolute positions keep the build off ``torch.cuda`` on every pinned version.
    """
    import torch.distributed as dist
    from megatron.core import parallel_state

    if dist.is_initialized():
        pytest.fail("torch.distributed is already initialised in this process; the provider case needs a world of one")
    store = dist.FileStore(str(tmp_path_factory.mktemp("provider-store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1)
        yield
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


REAL_RULES: tuple[Rules, ...] = (
    ([r"^embedding\.", r"linear_qkv"], None),
    (None, [r"decoder\.layers\.1\.", r"final_layernorm", r"output_layer"]),
    ([r"\.bias$"], [r"layers\.[0-9]+\.mlp\.", r"embedding"]),
)
STAGES = ((True, True), (False, False), (True, False))
VP_STAGE = 1


def test_real_gpt_model_through_the_wrapper(
    subject: ModuleType, target: Target, world_of_one: None, call_shape: str
) -> None:
    from megatron.core.models.gpt.gpt_model import GPTModel

    derived = process_group_parameter(GPTModel.__init__)
    keywords = target.provider.calls[call_shape]
    provider = GPTProvider(derived[0] if derived else None)
    names = freeze_rule_names(subject)
    caller_config = tiny_gpt_config()
    known: dict[str, Any] = {"vp_stage": VP_STAGE, "config": caller_config, "add_encoder": True, "add_decoder": True}
    pg_keyword = target.provider.process_group_keyword
    if derived and pg_keyword in keywords:
        known[pg_keyword] = derived[1].use_mpu_process_groups()
    unknown = [k for k in keywords if k not in (*known, "pre_process", "post_process")]
    assert not unknown, contract_failure(
        target, FAMILY.name, f"call shape '{call_shape}'", f"no real value known for {unknown}"
    )
    problems: dict[str, None] = {}
    for (pre_process, post_process), rules in itertools.product(STAGES, REAL_RULES):
        freeze, train_only = (rules[0] if names.freeze else None), (rules[1] if names.train_only else None)
        stages = {"pre_process": pre_process, "post_process": post_process}
        passed = {k: {**known, **stages}[k] for k in keywords}
        # The framework's args are parsed, then its provider wrapped: the rules are there when the wrapper is made.
        args = unset_rules(subject)
        args.set_rules(freeze, train_only)
        wrapped = subject.wrap_model_provider(provider, args)
        provider.built.clear()
        try:
            model = wrapped(**passed)
        except Exception as err:
            problems[call_failure(call_shape, passed, err, bool(provider.built))] = None
            # The freeze rules are still judged, on the bare call, so this red does not hide theirs.
            passed = stages
            provider.built.clear()
            try:
                model = wrapped(**passed)
            except Exception:
                continue
        if not provider.built or model is not provider.built[-1]:
            problems[f"call shape '{call_shape}': return value: {model!r} is not the GPTModel built"] = None
            continue
        for keyword, got in model_received(model, passed, derived).items():
            if got is not passed.get(keyword):
                detail = f"the caller passed {passed.get(keyword)!r}; the GPTModel built has {got!r}"
                problems[f"call shape '{call_shape}': keyword '{keyword}': {detail}"] = None
        frozen = expected_frozen([name for name, _ in model.named_parameters()], [(freeze, train_only)], names.match)
        mismatch = freeze_mismatch(model, frozen)
        if mismatch:
            built = f"GPTModel(pre_process={pre_process}, post_process={post_process})"
            detail = f"freeze={freeze} train_only={train_only} on {built}: {mismatch}"
            problems[f"call shape '{call_shape}': freeze rules: {detail}"] = None
    assert not problems, contract_failure(target, FAMILY.name, "a real GPTModel through the wrapper", list(problems))


def model_received(model: Any, passed: dict[str, Any], derived: tuple[str, type] | None) -> dict[str, Any]:
    """What the built ``GPTModel`` holds for each keyword that must reach it (``None`` standing for "not passed")."""
    received = {
        "pre_process": model.pre_process,
        "post_process": model.post_process,
        "vp_stage": model.vp_stage,
    }
    if "config" in passed:
        received["config"] = model.config
    if derived and derived[0] in passed:
        received[derived[0]] = getattr(model, derived[0])
    return received
