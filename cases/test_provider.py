"""Contract: model-provider wrapping. The subject's ``wrap_model_provider`` under each of the target's call shapes.

Megatron's training loop calls the model provider with keywords that change between releases (the target's
``provider.calls`` in matrix.yaml). Under every call shape a wrapped provider must hand the inner provider
``pre_process``/``post_process`` and each other keyword the caller passed that the inner accepts (by name or through
``**kwargs``); never a keyword the inner cannot take and never a value the caller did not pass; return the inner's
model after applying the freeze rules, read from ``args`` when the model is built; and let an error of the inner
provider out as the same exception object. Generated inner providers cover every parameter kind; a real ``GPTModel``
shows the values reach the model Megatron builds.

Freeze rules: ``args.freeze_patterns`` are regexes of parameter names to freeze, ``args.train_only_patterns`` regexes
of the only parameters to train; a pattern applies to a name when ``re.search`` finds it in the name.
"""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.contracts.provider_calls import (
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
from harness.targets.matrix import Target, load_matrix
from harness.targets.provider_shapes import (
    derive_calls,
    installed_training_file,
    process_group_parameter,
    shape_mismatches,
)

FAMILY = family("model-provider")
pytestmark = FAMILY.mark()

Rules = tuple[list[str] | None, list[str] | None]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One real-model case per call shape of the target, so a red names its shape in the test id too."""
    if "call_shape" in metafunc.fixturenames:
        options = metafunc.config.getoption
        target = load_matrix(options("--matrix")).target(options("--target"))
        metafunc.parametrize("call_shape", list(target.provider.calls))


def wrap(subject: ModuleType, provider: Callable[..., Any], args_per_level: list[argparse.Namespace]) -> Any:
    """``provider`` wrapped by the subject once per entry of ``args_per_level``, innermost first."""
    for args in args_per_level:
        provider = subject.wrap_model_provider(provider, args)
    return provider


def unset_rules() -> argparse.Namespace:
    """Launcher args as they are when the wrapper is made: the freeze options exist but are not set yet."""
    return argparse.Namespace(freeze_patterns=None, train_only_patterns=None)


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


@given(spec=provider_specs(), depth=st.integers(1, 2), data=st.data())
def test_keywords_reach_the_inner_provider(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    values = draw_caller_values(data, target)
    inner = InnerProvider(spec, make_model=lambda: parameter_tree(GPT_PARAMETER_NAMES[:2]))
    wrapped = wrap(subject, inner.callable, [unset_rules() for _ in range(depth)])
    problems = []
    for shape, keywords in target.provider.calls.items():
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
            for keyword, problem in inner.reception_problems(passed, inner.receptions[0])
        )
    assert not problems, contract_failure(
        target,
        FAMILY.name,
        f"keywords through the wrapper (inner provider: {spec.describe()}, wrapped {depth}x)",
        problems,
    )


@given(spec=provider_specs(), depth=st.integers(1, 2), data=st.data())
def test_returns_the_inner_model_with_freeze_rules_applied(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    values = draw_caller_values(data, target)
    rules: list[Rules] = [
        data.draw(st.tuples(freeze_patterns(), freeze_patterns()), label="rules") for _ in range(depth)
    ]
    inner = InnerProvider(spec, make_model=lambda: parameter_tree(GPT_PARAMETER_NAMES))
    args_per_level = [unset_rules() for _ in range(depth)]
    wrapped = wrap(subject, inner.callable, args_per_level)
    for args, (freeze, train_only) in zip(args_per_level, rules, strict=True):
        args.freeze_patterns, args.train_only_patterns = freeze, train_only
    frozen = expected_frozen(GPT_PARAMETER_NAMES, rules)
    described = f"rules {rules} (innermost first); inner provider {spec.describe()}"
    for shape, keywords in target.provider.calls.items():
        passed = {k: values[k] for k in keywords}
        inner.reset()
        try:
            model = wrapped(**passed)
        except Exception as err:
            failure = call_failure(shape, passed, err, bool(inner.receptions))
            raise AssertionError(contract_failure(target, FAMILY.name, failure)) from err
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


@given(spec=provider_specs(failing=True), depth=st.integers(1, 2), data=st.data())
def test_inner_provider_errors_propagate_unchanged(
    subject: ModuleType, target: Target, spec: ProviderSpec, depth: int, data: st.DataObject
) -> None:
    values = draw_caller_values(data, target)
    inner = InnerProvider(spec, make_model=lambda: parameter_tree(GPT_PARAMETER_NAMES[:2]))
    wrapped = wrap(subject, inner.callable, [unset_rules() for _ in range(depth)])
    for shape, keywords in target.provider.calls.items():
        passed = {k: values[k] for k in keywords}
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
            raise AssertionError(
                contract_failure(target, FAMILY.name, call_failure(shape, passed, caught, False))
            ) from caught
        assert len(inner.raised) == 1 and caught is inner.raised[0], contract_failure(
            target,
            FAMILY.name,
            f"call shape '{shape}': inner provider error",
            f"the inner provider raised {inner.raised!r}, the wrapper let out {caught!r}: it must propagate the "
            f"same exception object; inner provider {spec.describe()}, wrapped {depth}x",
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
    args = unset_rules()
    wrapped = subject.wrap_model_provider(provider, args)
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
    for (pre_process, post_process), (freeze, train_only) in itertools.product(STAGES, REAL_RULES):
        passed = {k: {**known, "pre_process": pre_process, "post_process": post_process}[k] for k in keywords}
        args.freeze_patterns, args.train_only_patterns = freeze, train_only
        provider.built.clear()
        try:
            model = wrapped(**passed)
        except Exception as err:
            problems[call_failure(call_shape, passed, err, bool(provider.built))] = None
            continue
        if not provider.built or model is not provider.built[-1]:
            problems[f"call shape '{call_shape}': return value: {model!r} is not the GPTModel built"] = None
            continue
        for keyword, got in model_received(model, passed, derived).items():
            if got is not passed.get(keyword):
                detail = f"the caller passed {passed.get(keyword)!r}; the GPTModel built has {got!r}"
                problems[f"call shape '{call_shape}': keyword '{keyword}': {detail}"] = None
        frozen = expected_frozen([name for name, _ in model.named_parameters()], [(freeze, train_only)])
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
