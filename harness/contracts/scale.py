"""Exact bytes per coalesced reduction of ``finalize_model_grads`` for a real model config, without a GPU.

Whether a chunked all-reduce patch still matters depends on how many bytes the target Megatron flattens into one
buffer for the models a framework trains: a few MiB of sequence-parallel norms for a dense model, possibly hundreds
for a large MoE. The tiny CPU GPT the gate steps says whether upstream coalesces, not how much. Here the model is
built at its real size on the ``meta`` device (no storage), in one process whose world is torch's ``fake`` process
group, under Megatron's own parallel state; each param gets a ``main_grad`` as Megatron's DDP gives it, and the
installed ``finalize_model_grads`` runs itself. Every all-reduce it reaches is recorded at the dispatcher with the
function of the finalize module that made it, and none is computed.

What is measured is this process's rank: tensor-, expert- and pipeline-parallel rank 0 (the first pipeline stage).
DDP's own bucketed grad sync (``finish_grad_sync``) is not a reduction of ``finalize_model_grads`` and is left out.
Layers use Megatron's local specs, as the CPU GPT does, their norms made sequence-parallel capable; a field only
Transformer Engine layers honour is named as ignored.

Run in a target venv: ``python -m harness.contracts.scale <request.json>`` prints one JSON object per model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import json
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from torch.utils._python_dispatch import TorchDispatchMode

from harness.contracts.collectives import message_bytes
from harness.contracts.step_memory import coalesced_reductions, finalize_site
from harness.formats.scale_findings import DEFAULT_MODELS, verdict_text
from harness.ranks.cpu_gpt import current_device_is_cpu, replaced_in_spec, sequence_parallel_norm
from harness.targets.megatron_names import FINALIZE_MODULE

PRESETS = Path(__file__).with_name("scale_presets.yaml")
DEFAULT_BUDGET = 1 << 30
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TE_ONLY = ("fp8", "fp8_recipe", "apply_rope_fusion", "bias_activation_fusion", "masked_softmax_fusion")
"""Fields the local layer specs never read: a preset that sets them is measured without them."""
_PARALLEL = ("tp", "sp", "ep", "pp", "main_grad_dtype")
ELSEWHERE = "elsewhere"
"""Where a record made outside every function of the finalize module is kept."""


class ScaleError(ValueError):
    """A model request that cannot be built: one line naming the model and what is wrong."""


@dataclass(frozen=True)
class ModelRequest:
    """One model to measure: its config fields, its parallel layout and the dtype of its main grads."""

    name: str
    fields: dict[str, Any]
    vocab_size: int
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    tp: int = 1
    sp: bool = False
    ep: int = 1
    pp: int = 1
    main_grad_dtype: str = "float32"


@dataclass
class Reduction:
    """One coalesced reduction reached: the largest buffer upstream flattened, and how many collectives it ran;
    under the subject, the largest message it sent and how many."""

    name: str
    upstream_bytes: int = 0
    upstream_collectives: int = 0
    subject_bytes: int = 0
    subject_collectives: int = 0
    subject_buffer: int = 0
    """The largest buffer the subject made for this reduction (a chunk, or everything where it flattens it all)."""


@dataclass
class ScaleResult:
    """A model on this target: the reductions reached, those not reached, fields ignored, the budget and where it
    came from, and the verdict."""

    model: str
    megatron: str
    reductions: list[Reduction] = field(default_factory=list)
    not_reached: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    budget: int = DEFAULT_BUDGET
    budget_source: str = "1 GiB (nothing named a budget)"
    verdict: str = ""


class SiteCollectives(TorchDispatchMode):
    """Every all-reduce run in the block, by the finalize function that made it (``sites``: the bytes of each), and
    the largest new tensor each made (``allocated``): an op output that aliases none of its inputs, which on the meta
    device is a buffer that would be allocated, with no storage behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: dict[str, list[int]] = {}
        self.allocated: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.namespace == "c10d" and func._opname in ("allreduce_", "allreduce_coalesced_"):
            self.sites.setdefault(finalize_site() or ELSEWHERE, []).append(message_bytes(list(args[0])))
            return func(*args, **(kwargs or {}))
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and all(ret.alias_info is None for ret in func._schema.returns):
            site = finalize_site() or ELSEWHERE
            self.allocated[site] = max(self.allocated.get(site, 0), message_bytes([out]))
        return out


def load_presets(path: Path = PRESETS) -> dict[str, dict[str, Any]]:
    """The published architectures, by preset name."""
    return yaml.safe_load(path.read_text())


def request_from(model: dict[str, Any], presets: dict[str, dict[str, Any]]) -> ModelRequest:
    """A ``[scale] models`` entry (a preset and its parallel layout, or ``fields`` of its own) as a request."""
    name = model.get("name") or model.get("preset") or "model"
    preset = presets.get(model["preset"]) if "preset" in model else {}
    if preset is None:
        raise ScaleError(f"model {name!r}: no preset {model['preset']!r} (known: {', '.join(presets)})")
    fields = {**preset.get("fields", {}), **model.get("fields", {})}
    layout = {key: model[key] for key in _PARALLEL if key in model}
    unknown = set(model) - {"name", "preset", "fields", "vocab_size", "max_position_embeddings", *_PARALLEL}
    if unknown:
        raise ScaleError(
            f"model {name!r}: unknown keys {sorted(unknown)} (known: preset, fields, {', '.join(_PARALLEL)})"
        )
    if layout.get("main_grad_dtype", "float32") not in DTYPES:
        raise ScaleError(f"model {name!r}: main_grad_dtype must be one of {', '.join(DTYPES)}")
    vocab = model.get("vocab_size", preset.get("vocab_size"))
    if not vocab:
        raise ScaleError(f"model {name!r}: no vocab_size")
    return ModelRequest(
        name=name,
        fields=fields,
        vocab_size=int(vocab),
        max_position_embeddings=int(model.get("max_position_embeddings", preset.get("max_position_embeddings", 4096))),
        tie_word_embeddings=bool(preset.get("tie_word_embeddings", False)),
        **layout,
    )


class _CoreAttention(torch.nn.Module):
    """Stands in for the local spec's ``DotProductAttention``, which holds no parameter: nothing here runs a forward,
    and the local MLA spec passes it keywords (``k_channels``) that some releases' class refuses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()


def _config(request: ModelRequest) -> tuple[Any, list[str]]:
    """The Megatron config of ``request`` (MLA's where it has MLA fields), and the fields ignored."""
    module = importlib.import_module("megatron.core.transformer.transformer_config")
    mla = any(key in request.fields for key in ("q_lora_rank", "kv_lora_rank"))
    cls = module.MLATransformerConfig if mla else module.TransformerConfig
    known = {f.name for f in dataclasses.fields(cls)}
    ignored = sorted(key for key in request.fields if key not in known or key in TE_ONLY)
    fields = {k: v for k, v in request.fields.items() if k not in ignored}
    if mla:
        fields["multi_latent_attention"] = True
        # Rotary tables hold no parameter; YaRN's precomputes a cache that mixes devices on the meta device.
        if "rope_type" in known:
            fields["rope_type"] = "rope"
    config = cls(
        **fields,
        tensor_model_parallel_size=request.tp,
        pipeline_model_parallel_size=request.pp,
        expert_model_parallel_size=request.ep,
        sequence_parallel=request.sp,
        use_cpu_initialization=True,
        perform_initialization=False,
        params_dtype=torch.bfloat16,
        bf16=True,
    )
    return config, ignored


def _block_spec(config: Any) -> Any:
    """Megatron's local decoder block spec for ``config`` (dense and MoE layers as ``moe_layer_freq`` says), its
    norms sequence-parallel capable."""
    specs = importlib.import_module("megatron.core.models.gpt.gpt_layer_specs")
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    block = specs.get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=config.normalization)
    replacements = {WrappedTorchNorm: sequence_parallel_norm(config.normalization), DotProductAttention: _CoreAttention}
    return replaced_in_spec(block, replacements)


@contextlib.contextmanager
def parallel_world(request: ModelRequest) -> Iterator[None]:
    """Rank 0 of a world of ``tp x pp x ep`` ranks, as torch's ``fake`` process group, with Megatron's parallel state
    initialised on it (no gloo group: the fake backend has none); both are torn down after."""
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.distributed.init_process_group(
        "fake", store=FakeStore(), rank=0, world_size=request.tp * request.pp * request.ep
    )
    options = inspect.signature(parallel_state.initialize_model_parallel).parameters
    extra = {"create_gloo_process_groups": False} if "create_gloo_process_groups" in options else {}
    try:
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=request.tp,
            pipeline_model_parallel_size=request.pp,
            expert_model_parallel_size=request.ep,
            **extra,
        )
        yield
    finally:
        parallel_state.destroy_model_parallel()
        torch.distributed.destroy_process_group()


@contextlib.contextmanager
def _no_transformer_engine_stand_ins() -> Iterator[None]:
    """MLA believes Transformer Engine is there while its classes are stand-ins, then restored.

    Where ``transformer_engine`` is missing, Megatron's TE extension binds mock stand-ins for its classes, so
    ``multi_latent_attention`` (0.16) imports them fine, sets ``HAVE_TE`` and asks ``isinstance(..., TELinear)`` of
    every local-spec layer, which raises. TE is not installed here, which is what ``HAVE_TE = False`` says.
    """
    module = importlib.import_module("megatron.core.transformer.multi_latent_attention")
    stand_in = getattr(module, "HAVE_TE", False) and not isinstance(getattr(module, "TELinear", None), type)
    if stand_in:
        module.HAVE_TE = False
    try:
        yield
    finally:
        if stand_in:
            module.HAVE_TE = True


def build_meta_model(request: ModelRequest) -> tuple[torch.nn.Module, list[str]]:
    """The first pipeline stage of ``request`` on the meta device, each param with its ``main_grad`` as Megatron's
    DDP gives it (in ``main_grad_dtype``), and the fields ignored; call inside :func:`parallel_world`."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_model import GPTModel

    config, ignored = _config(request)
    # Rotary tables (YaRN's among them) are made on the current CUDA device whatever use_cpu_initialization says.
    with torch.device("meta"), current_device_is_cpu(), _no_transformer_engine_stand_ins():
        model = GPTModel(
            config=config,
            transformer_layer_spec=_block_spec(config),
            vocab_size=request.vocab_size,
            max_sequence_length=request.max_position_embeddings,
            position_embedding_type="rope",
            share_embeddings_and_output_weights=request.tie_word_embeddings,
            pre_process=True,
            post_process=request.pp == 1,
        )
    for param in model.parameters():
        param.main_grad = torch.empty(param.shape, dtype=DTYPES[request.main_grad_dtype], device="meta")
    model.ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=request.main_grad_dtype == "float32")
    model.finish_grad_sync = lambda *args, **kwargs: None
    return model, ignored


def collectives_of(model: torch.nn.Module) -> SiteCollectives:
    """The all-reduces the installed ``finalize_model_grads`` runs on ``model`` and the largest buffers it makes, by
    the function that ran each."""
    finalize = importlib.import_module(FINALIZE_MODULE).finalize_model_grads
    with SiteCollectives() as recorded:
        finalize([model])
    return recorded


def _budget(subject: Any, given: int | None) -> tuple[int | None, int, str]:
    """What to install the subject with (``None``: its own default), the budget that is, and where it came from:
    ``[scale] budget``, else the subject's own default (the value its budget global holds after import, else the
    default of its apply's budget argument), else 1 GiB."""
    if given is not None:
        return given, given, "declared in [scale]"
    if hasattr(subject, "installed_budget"):
        subject.install()
        try:
            held = subject.installed_budget()
        finally:
            subject.uninstall()
        if held is not None:
            return None, held, "the subject's own default"
    if hasattr(subject, "default_budget"):
        value, source = subject.default_budget()
        if value is not None:
            return None, value, source
    return DEFAULT_BUDGET, DEFAULT_BUDGET, "1 GiB (nothing named a budget)"


def _attributed(sites: dict[str, Any], replaced: list[str]) -> dict[str, Any]:
    """The subject's records by reduction: a replaced reduction's run in the subject's own function, called from
    ``finalize_model_grads`` itself, so they are found under that name (an alias shares them)."""
    own = sites.get("finalize_model_grads")
    return {**sites, **{name: own for name in replaced if own is not None}}


def measure(request: ModelRequest, subject: Any = None, budget: int | None = None) -> ScaleResult:
    """``request`` on this target: upstream's coalesced reductions, then (with ``subject``) the same step with the
    subject installed at its budget."""
    module = importlib.import_module(FINALIZE_MODULE)
    version = importlib.import_module("megatron.core.package_info").__version__
    result = ScaleResult(request.name, version)
    coalesced = coalesced_reductions(module)  # read before any install: a replacement may not flatten at all
    with parallel_world(request):
        model, result.ignored = build_meta_model(request)
        upstream = collectives_of(model).sites
        under_subject: dict[str, list[int]] = {}
        buffers: dict[str, int] = {}
        result.budget_source = "no subject"
        if subject is not None:
            chosen, result.budget, result.budget_source = _budget(subject, budget)
            pinned = dict(vars(module))
            subject.install(chosen)
            try:
                replaced = [name for name in coalesced if getattr(module, name) is not pinned[name]]
                recorded = collectives_of(model)
                under_subject = _attributed(recorded.sites, replaced)
                buffers = _attributed(recorded.allocated, replaced)
            finally:
                subject.uninstall()
    for name in coalesced:
        if upstream.get(name):
            messages, subject_messages = upstream[name], under_subject.get(name, [])
            largest_sent = max(subject_messages, default=0)
            result.reductions.append(
                Reduction(name, max(messages), len(messages), largest_sent, len(subject_messages), buffers.get(name, 0))
            )
        else:
            result.not_reached.append(name)
    reached = [dataclasses.asdict(reduction) for reduction in result.reductions]
    result.verdict = verdict_text(reached, result.budget)
    return result


def cross_check(measured: ScaleResult, real_sites: dict[str, int]) -> list[str]:
    """Where the meta measurement of a model and a real step of the same model disagree: each coalesced reduction must
    flatten the same bytes in both (the real step's largest tensor in that function is its buffer), and a reduction
    the real step flattened must have been reached on the meta device too."""
    problems = []
    reached = {reduction.name: reduction.upstream_bytes for reduction in measured.reductions}
    for name in [*reached, *(n for n in measured.not_reached if real_sites.get(n))]:
        if reached.get(name) != real_sites.get(name):
            problems.append(
                f"{name}: {reached.get(name, 'not reached')} bytes on the meta device, "
                f"{real_sites.get(name, 'nothing')} in the real step"
            )
    return problems


def layout(model: dict[str, Any]) -> str:
    """``TP 8 + SP, EP 32``: a model entry's parallel layout as the findings name it."""
    parts = [f"TP {model.get('tp', 1)}{' + SP' if model.get('sp') else ''}"]
    parts += [f"{key.upper()} {model[key]}" for key in ("ep", "pp") if model.get(key, 1) != 1]
    parts += [f"main grads {model['main_grad_dtype']}"] if model.get("main_grad_dtype", "float32") != "float32" else []
    return ", ".join(parts)


def measure_all(models: list[dict[str, Any]], subject: Any, budget: int | None) -> Iterator[dict[str, Any]]:
    """Each model's result as a JSON-ready dict with its ``layout``; a model that cannot be built here gives its
    ``error`` in one line instead (a preset field an older release lacks, an upstream spec that needs CUDA)."""
    presets = load_presets()
    version = importlib.import_module("megatron.core.package_info").__version__
    for model in models:
        name = model.get("name") or model.get("preset") or "model"
        try:
            found = dataclasses.asdict(measure(request_from(model, presets), subject, budget))
        except Exception as err:  # one model's failure is its own line; the others still get measured
            message = " ".join(f"{type(err).__name__}: {err}".split())
            found = {"model": name, "megatron": version, "error": message[:400]}
        yield {**found, "layout": layout(model)}


def measured_lines(request: dict[str, Any]) -> Iterator[str]:
    """One JSON line per model of ``request``: ``{"models": [...] (default: DEFAULT_MODELS), "subject": spec or null,
    "budget": bytes or null}``."""
    from harness.subjects.loading import load_subject

    subject = load_subject(request["subject"]) if request.get("subject") else None
    for found in measure_all(request.get("models") or list(DEFAULT_MODELS), subject, request.get("budget")):
        yield json.dumps(found)


def measured_output(request: dict[str, Any]) -> str:
    """:func:`measured_lines` as ``python -m harness.contracts.scale`` prints them: what a session's forked process
    sends back. What the subject or Megatron print or warn meanwhile is not kept, as the fresh interpreter's output
    other than its lines was not; an error that stops the measurement is the forked call's to report."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return "\n".join(measured_lines(request))


def main(argv: list[str]) -> int:
    """``python -m harness.contracts.scale <request.json>``: :func:`measured_lines` of the request, on stdout."""
    for line in measured_lines(json.loads(Path(argv[0]).read_text())):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
