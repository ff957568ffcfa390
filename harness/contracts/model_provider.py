"""Inner model providers, caller values and freeze rules for the provider-wrapping contract.

A wrapper learns what its inner provider accepts from what Python exposes about it: ``inspect.signature``, the code
object, a ``functools.partial``'s bound arguments, or simply by calling and letting Python's binding refuse. The
inner providers here are therefore real ``def`` source compiled with ``exec`` (never a function with a patched
``__signature__``), so every introspection path and the interpreter's own argument binding agree on what a provider
takes. Each one records exactly what it received, by parameter, ``*args`` and ``**kwargs``; its defaults are unique
sentinels, so a value the wrapper invented cannot pass for the provider's own default.

A target's provider contract also names the keyword its ``GPTModel`` takes process groups through; that part is read
off the installed package here, from the annotation Megatron gives that parameter, so a stale matrix entry shows.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from harness.contracts.gate_strategies import composite
from harness.contracts.strategy_cache import sampled
from harness.targets.matrix import ALWAYS_PASSED
from harness.targets.megatron_names import TINY_GPT

_POSITIONAL_ONLY = inspect.Parameter.POSITIONAL_ONLY
_POSITIONAL_OR_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY
_BY_NAME = (_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY)

# Keywords some Megatron release passes to a provider, and names a provider may declare that no caller passes.
_OPTIONAL_NAMES = (
    "vp_stage",
    "config",
    "pg_collection",
    "add_encoder",
    "add_decoder",
    "model_comm_pgs",
    "parallel_output",
)
# Absent, by name or positional-only; positional-only drawn less often, since one such name already puts a
# positional-only group in front of the whole signature.
_OPTIONAL_KINDS = (None, _POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY) * 2 + (_POSITIONAL_ONLY,)
# How a provider reaches the wrapper: a plain function, a ``functools.partial`` over a leading builder argument (the
# form Megatron-LM's pretrain scripts hand to ``get_model`` from 0.16 on), or an object with ``__call__``.
_FORMS = ("function", "partial", "callable")
_VAR_POSITIONAL_NAME = "extra_args"
_VAR_KEYWORD_NAME = "extra_kwargs"
_BUILDER_NAME = "builder"

# Parameter names of a 2-layer GPTModel on the local layer spec with learned absolute positions, the same on
# megatron-core 0.13.1 to 0.16.1; the real-model case checks the freeze rules on the model it builds itself.
GPT_PARAMETER_NAMES = (
    "embedding.word_embeddings.weight",
    "embedding.position_embeddings.weight",
    *(
        f"decoder.layers.{layer}.{module}.{kind}"
        for layer in (0, 1)
        for module in (
            "input_layernorm",
            "self_attention.linear_proj",
            "self_attention.linear_qkv",
            "pre_mlp_layernorm",
            "mlp.linear_fc1",
            "mlp.linear_fc2",
        )
        for kind in ("weight", "bias")
    ),
    "decoder.final_layernorm.weight",
    "decoder.final_layernorm.bias",
    "output_layer.weight",
)
_REALISTIC_PATTERNS = (
    r"embedding",
    r"^embedding\.",
    r"\.bias$",
    r"layernorm",
    r"linear_qkv",
    r"self_attention",
    r"layers\.[0-9]+\.mlp\.",
    r"^decoder\.layers\.0\.",
    r"output_layer",
    r"\.weight$",
)


class ProviderFailure(Exception):
    """An error of the provider's own making, of a type no wrapper could anticipate."""


_ERROR_TYPES: tuple[type[BaseException], ...] = (
    ProviderFailure,
    RuntimeError,
    TypeError,
    ValueError,
    KeyError,
    AssertionError,
    torch.OutOfMemoryError,
)


class Sentinel:
    """A unique value that prints what it stands for."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"<{self.label}>"


@dataclass(frozen=True)
class ProviderParameter:
    """One named parameter of an inner provider."""

    name: str
    kind: inspect._ParameterKind
    has_default: bool


@dataclass(frozen=True)
class ProviderSpec:
    """The signature and form of one inner provider, and the error type it raises when it is to fail."""

    params: tuple[ProviderParameter, ...]
    var_positional: bool
    var_keyword: bool
    form: str
    error: type[BaseException] | None = None

    def accepts_by_name(self, name: str) -> bool:
        """Whether a keyword ``name`` binds to a named parameter."""
        return any(p.name == name and p.kind in _BY_NAME for p in self.params)

    def signature_source(self) -> str:
        """The parameter list as written in the provider's ``def``."""
        # ``self`` or the partial's builder leads; it joins a positional-only group, which must come first.
        leading_kind = (
            _POSITIONAL_ONLY if any(p.kind is _POSITIONAL_ONLY for p in self.params) else _POSITIONAL_OR_KEYWORD
        )
        leading = {"callable": ["self"], "partial": [_BUILDER_NAME]}.get(self.form, [])
        entries = [ProviderParameter(name, leading_kind, False) for name in leading] + list(self.params)
        parts = [_parameter_source(p) for p in entries if p.kind is _POSITIONAL_ONLY]
        if parts:
            parts.append("/")
        parts.extend(_parameter_source(p) for p in entries if p.kind is _POSITIONAL_OR_KEYWORD)
        keyword_only = [_parameter_source(p) for p in entries if p.kind is _KEYWORD_ONLY]
        if self.var_positional:
            parts.append(f"*{_VAR_POSITIONAL_NAME}")
        elif keyword_only:
            parts.append("*")
        parts.extend(keyword_only)
        if self.var_keyword:
            parts.append(f"**{_VAR_KEYWORD_NAME}")
        return ", ".join(parts)

    def describe(self) -> str:
        """The provider as a failure message shows it: its ``def`` line and its form."""
        name = "__call__" if self.form == "callable" else "provider"
        return f"def {name}({self.signature_source()}) [{self.form}]"


def _parameter_source(param: ProviderParameter) -> str:
    return f"{param.name}=_defaults[{param.name!r}]" if param.has_default else param.name


@dataclass
class Reception:
    """What one call of an inner provider received: named parameters, ``*args`` and ``**kwargs``."""

    named: dict[str, Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass
class InnerProvider:
    """A compiled inner provider and its log: each call's reception, the model it returned, the error it raised."""

    spec: ProviderSpec
    make_model: Callable[[], Any]
    callable: Callable[..., Any] = field(init=False)
    defaults: dict[str, Sentinel] = field(init=False)
    builder: Sentinel = field(init=False)
    receptions: list[Reception] = field(default_factory=list)
    returned: list[Any] = field(default_factory=list)
    raised: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.defaults = {p.name: Sentinel(f"inner default of {p.name}") for p in self.spec.params if p.has_default}
        self.builder = Sentinel("builder bound by functools.partial")
        namespace: dict[str, Any] = {"_defaults": self.defaults, "_receive": self._receive}
        signature, body = self.spec.signature_source(), "return _receive(locals())"
        if self.spec.form == "callable":
            source = f"class Provider:\n    def __call__({signature}):\n        {body}\n"
        else:
            source = f"def provider({signature}):\n    {body}\n"
        exec(compile(source, "<generated provider>", "exec"), namespace)
        if self.spec.form == "callable":
            self.callable = namespace["Provider"]()
        elif self.spec.form == "partial":
            self.callable = functools.partial(namespace["provider"], self.builder)
        else:
            self.callable = namespace["provider"]

    def _receive(self, local_names: dict[str, Any]) -> Any:
        hidden = ("self", _VAR_POSITIONAL_NAME, _VAR_KEYWORD_NAME)
        self.receptions.append(
            Reception(
                named={k: v for k, v in local_names.items() if k not in hidden},
                args=tuple(local_names.get(_VAR_POSITIONAL_NAME, ())),
                kwargs=dict(local_names.get(_VAR_KEYWORD_NAME, {})),
            )
        )
        if self.spec.error is not None:
            error = self.spec.error(f"inner provider failure #{len(self.raised) + 1}")
            self.raised.append(error)
            raise error
        model = self.make_model()
        self.returned.append(model)
        return model

    def reset(self) -> None:
        """Forget earlier calls, so the checks of the next call see that call only."""
        self.receptions.clear()
        self.returned.clear()
        self.raised.clear()

    def reception_problems(
        self, passed: dict[str, Any], reception: Reception, invented: bool = False
    ) -> list[tuple[str, str]]:
        """``(keyword, problem)`` for each way ``reception`` differs from what a call passing ``passed`` must give:
        with ``invented``, only the values the caller did not pass that reached the inner provider anyway (a wrapper
        that always passes ``vp_stage=None`` overrides the inner's own default), else every other difference."""
        problems: list[tuple[str, str]] = []
        made_up: list[tuple[str, str]] = []
        if self.spec.form == "partial" and reception.named.get(_BUILDER_NAME) is not self.builder:
            got = reception.named.get(_BUILDER_NAME)
            problems.append((_BUILDER_NAME, f"the partial's bound argument was replaced by {got!r}"))
        for param in self.spec.params:
            got = reception.named[param.name]
            default = self.defaults.get(param.name)
            if param.kind in _BY_NAME and param.name in passed:
                want = passed[param.name]
                if got is not want:
                    lost = "its own default: the wrapper dropped it" if got is default else repr(got)
                    problems.append((param.name, f"the caller passed {want!r}; the inner provider received {lost}"))
            elif got is not default:
                why = "takes it positionally only" if param.kind is _POSITIONAL_ONLY else "was not passed it"
                detail = f"the inner provider {why}, yet received {got!r} instead of its own default: invented"
                made_up.append((param.name, detail))
        if self.spec.var_keyword:
            expected = {k: v for k, v in passed.items() if not self.spec.accepts_by_name(k)}
            for name, want in expected.items():
                if name not in reception.kwargs:
                    problems.append((name, f"the caller passed {want!r}; the inner provider's **kwargs never got it"))
                elif reception.kwargs[name] is not want:
                    got = reception.kwargs[name]
                    problems.append((name, f"the caller passed {want!r}; the inner provider's **kwargs got {got!r}"))
            for name in sorted(set(reception.kwargs) - set(expected)):
                got = reception.kwargs[name]
                made_up.append(
                    (name, f"the caller did not pass it, yet the inner provider's **kwargs got {got!r}: invented")
                )
        if reception.args:
            problems.append(
                (
                    f"*{_VAR_POSITIONAL_NAME}",
                    f"the inner provider's *args received {reception.args!r}: the caller passes keywords only",
                )
            )
        return made_up if invented else problems


@composite
def provider_specs(
    draw: st.DrawFn,
    failing: bool = False,
    positional_only: bool = True,
    var_keyword: bool | None = None,
    names: Iterable[str] = (),
) -> ProviderSpec:
    """Inner providers with every parameter kind, in every form; raising a drawn error type when ``failing``;
    without positional-only parameters unless ``positional_only``.

    ``pre_process``/``post_process`` are named parameters, required or not, unless ``**kwargs`` takes them; the
    other names come with a default or not at all, since a caller may legitimately omit them. ``var_keyword`` fixes
    whether the provider takes ``**kwargs`` (drawn when ``None``); without ``**kwargs`` every name in ``names`` is a
    named parameter: an inner provider written for the keywords Megatron passes it, as a framework's own are.
    """
    var_keyword = draw(st.booleans()) if var_keyword is None else var_keyword
    must_name = set() if var_keyword else set(names)
    params = []
    for name in ALWAYS_PASSED:
        kind = draw(sampled((_POSITIONAL_OR_KEYWORD, _KEYWORD_ONLY, *((None,) if var_keyword else ()))))
        if kind is not None:
            params.append(ProviderParameter(name, kind, draw(st.booleans())))
    kinds = _OPTIONAL_KINDS if positional_only else tuple(k for k in _OPTIONAL_KINDS if k is not _POSITIONAL_ONLY)
    for name in _OPTIONAL_NAMES:
        kind = draw(sampled(tuple(k for k in kinds if k in _BY_NAME) if name in must_name else kinds))
        if kind is not None:
            params.append(ProviderParameter(name, kind, True))
    return ProviderSpec(
        params=_valid_order(draw(st.permutations(params))),
        var_positional=draw(st.booleans()),
        var_keyword=var_keyword,
        form=draw(sampled(_FORMS)),
        error=draw(sampled(_ERROR_TYPES)) if failing else None,
    )


def _valid_order(params: Iterable[ProviderParameter]) -> tuple[ProviderParameter, ...]:
    """The parameters in an order Python accepts, keeping the drawn order within each kind.

    Positional parameters without a default must precede those with one; a required positional-or-keyword
    parameter that would follow a positional-only default becomes keyword-only instead.
    """
    params = list(params)
    positional_only = [p for p in params if p.kind is _POSITIONAL_ONLY]
    positional = []
    keyword_only = [p for p in params if p.kind is _KEYWORD_ONLY]
    for param in params:
        if param.kind is _POSITIONAL_OR_KEYWORD:
            if positional_only and not param.has_default:
                keyword_only.append(ProviderParameter(param.name, _KEYWORD_ONLY, False))
            else:
                positional.append(param)
    positional.sort(key=lambda p: p.has_default)
    return (*positional_only, *positional, *keyword_only)


@functools.cache
def caller_value(keyword: str) -> st.SearchStrategy[Any]:
    """What Megatron's training loop passes for ``keyword``: flags, a stage index, or an object of its own."""
    if keyword in ("pre_process", "post_process", "add_encoder", "add_decoder"):
        return st.booleans()
    if keyword == "vp_stage":
        return st.integers(0, 15)
    return st.builds(Sentinel, st.just(f"caller's {keyword}"))


def parameter_tree(names: Iterable[str]) -> torch.nn.Module:
    """A module whose ``named_parameters()`` are exactly ``names`` (one-element tensors), nested as the dots say."""
    root = torch.nn.Module()
    for name in names:
        *path, leaf = name.split(".")
        module = root
        for part in path:
            child = dict(module.named_children()).get(part)
            if child is None:
                child = torch.nn.Module()
                module.add_module(part, child)
            module = child
        module.register_parameter(leaf, torch.nn.Parameter(torch.zeros(1)))
    return root


@composite
def _name_fragment(draw: st.DrawFn) -> str:
    """A run of dotted components of a real parameter name, anchored where it starts or ends the name."""
    parts = draw(st.sampled_from(GPT_PARAMETER_NAMES)).split(".")
    start = draw(st.integers(0, len(parts) - 1))
    stop = draw(st.integers(start + 1, len(parts)))
    pattern = r"\.".join(re.escape(part) for part in parts[start:stop])
    if start == 0 and draw(st.booleans()):
        pattern = "^" + pattern
    if stop == len(parts) and draw(st.booleans()):
        pattern += "$"
    return pattern


@functools.cache
def freeze_patterns() -> st.SearchStrategy[list[str] | None]:
    """A freeze or train-only pattern list as a launcher would configure it (absent, or a few regexes). Never an
    empty list: whether an empty train-only list means "no rule" or "train nothing" is the framework's convention,
    and nothing Megatron does decides it."""
    pattern = st.one_of(st.sampled_from(_REALISTIC_PATTERNS), _name_fragment())
    return st.one_of(st.none(), st.lists(pattern, min_size=1, max_size=3))


def expected_frozen(
    names: Iterable[str], rules: Iterable[tuple[list[str] | None, list[str] | None]], match: str = "search"
) -> set[str]:
    """The names a model must have frozen after each ``(freeze, train_only)`` rule pair was applied to it.

    A name is frozen by a pair when a freeze pattern applies to it, or when train-only patterns are given and none
    applies to it; a pattern applies when ``re.<match>`` (``search``, ``match`` or ``fullmatch``, as the subject
    declares) finds it in the name. Rules only ever freeze, so several pairs (a wrapper of a wrapper) freeze the union.
    """
    applies = getattr(re, match)
    frozen = set()
    for name in names:
        for freeze, train_only in rules:
            if any(applies(p, name) for p in freeze or []):
                frozen.add(name)
            elif train_only and not any(applies(p, name) for p in train_only):
                frozen.add(name)
    return frozen


def freeze_mismatch(model: torch.nn.Module, frozen: set[str]) -> str | None:
    """What differs between ``model``'s frozen parameters and the expected ``frozen`` names; None when nothing."""
    wrongly_frozen, wrongly_trainable = [], []
    for name, param in model.named_parameters():
        if name in frozen and param.requires_grad:
            wrongly_trainable.append(name)
        elif name not in frozen and not param.requires_grad:
            wrongly_frozen.append(name)
    found = [
        f"{label} {_some(names)}"
        for label, names in (("wrongly frozen", wrongly_frozen), ("wrongly left trainable", wrongly_trainable))
        if names
    ]
    return "; ".join(found) or None


def _some(names: list[str], shown: int = 4) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return "[" + ", ".join(names[:shown]) + more + "]"


def tiny_gpt_config() -> Any:
    """The ``TransformerConfig`` of a GPT small enough to build in milliseconds on CPU, TP=1, no sequence parallel."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=TINY_GPT.num_layers,
        hidden_size=TINY_GPT.hidden_size,
        num_attention_heads=TINY_GPT.num_attention_heads,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
    )


@dataclass
class GPTProvider:
    """A GPT model provider as Megatron-LM's ``pretrain_gpt.py`` writes one, built on the installed ``GPTModel``.

    It names every keyword some release's ``get_model`` passes a provider (``vp_stage``; ``config`` and
    ``pg_collection`` from 0.16; ``add_encoder``/``add_decoder``, which 0.13 passes only to the provider of an
    encoder-decoder model and a GPT has no use for), as a framework's own provider names what Megatron passes it: a
    wrapper may forward them all or pass only what the provider names. It hands ``GPTModel`` the process groups under
    the keyword the installed ``GPTModel`` names (``process_group_keyword``) and only when the caller gave some; the
    caller's config replaces the provider's own.
    """

    process_group_keyword: str | None
    built: list[Any] = field(default_factory=list)

    def __call__(
        self,
        pre_process: bool = True,
        post_process: bool = True,
        vp_stage: int | None = None,
        config: Any = None,
        pg_collection: Any = None,
        add_encoder: bool = True,
        add_decoder: bool = True,
    ) -> Any:
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel

        process_groups = {}
        if pg_collection is not None:
            if self.process_group_keyword is None:
                raise TypeError("this GPTModel takes no process groups, yet the caller passed pg_collection")
            process_groups[self.process_group_keyword] = pg_collection
        model = GPTModel(
            config=config if config is not None else tiny_gpt_config(),
            transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=TINY_GPT.vocab_size,
            max_sequence_length=TINY_GPT.seq_length,
            pre_process=pre_process,
            post_process=post_process,
            vp_stage=vp_stage,
            **process_groups,
        )
        self.built.append(model)
        return model
