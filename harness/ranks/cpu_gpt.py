"""A real Megatron ``GPTModel`` whose grads reach ``finalize_model_grads`` on CPU, inside a gloo rank process.

A hand-made module can carry the attributes upstream's TP all-reduce reads, but not the grads a training step hands
it: sequence-parallel layernorm grads that differ between the TP ranks, held as fp32 ``main_grad`` views into the
buffers of Megatron's ``DistributedDataParallel``. The smallest GPT that takes that path (local layer spec, TP=2,
sequence parallelism) gives the gate those grads on every pinned version.

Megatron assumes CUDA (or Apex/Transformer Engine) at a few places on that path. :func:`cpu_workarounds` bridges the
process-wide ones for the duration of a ``with`` block in a rank process; the others are bridged in what this module
hands Megatron (the layernorm class in the spec, an explicit causal mask in the batch), so nothing outside the rank
process and nothing at import is altered. On a GPU (:func:`device_workarounds` with a CUDA device) only the RNG
tracker is bridged, and the model, drawn on the CPU from the same seed, is moved to the rank's GPU before Megatron's
DDP wraps it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from harness.targets.megatron_names import FINALIZE_MODULE, RNG_MODULE, TINY_GPT


class _SequenceParallelLayerNorm(torch.nn.LayerNorm):
    """torch's LayerNorm, built from a Megatron config the way the fused and Transformer Engine norms are.

    Under sequence parallelism each TP rank normalises its own slice of the sequence, so a norm's weight and bias
    grads are partial sums that ``finalize_model_grads`` must all-reduce; upstream recognises them by the
    ``sequence_parallel`` attribute those norms set on their params. The local spec's ``WrappedTorchNorm`` (what it
    uses without Apex) asserts ``not config.sequence_parallel`` instead.
    """

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_unused: Any) -> None:
        super().__init__(hidden_size, eps=eps)
        _mark_sequence_parallel(self, config)


class _SequenceParallelRMSNorm(torch.nn.RMSNorm):
    """torch's RMSNorm (a weight, no bias), built from a Megatron config as :class:`_SequenceParallelLayerNorm` is."""

    def __init__(self, config: Any, hidden_size: int, eps: float = 1e-5, **_unused: Any) -> None:
        super().__init__(hidden_size, eps=eps)
        _mark_sequence_parallel(self, config)


def _mark_sequence_parallel(norm: torch.nn.Module, config: Any) -> None:
    for param in norm.parameters():
        param.sequence_parallel = config.sequence_parallel


def sequence_parallel_norm(normalization: str) -> type[torch.nn.Module]:
    """The sequence-parallel capable torch norm of a config's ``normalization`` (LayerNorm unless ``RMSNorm``)."""
    return _SequenceParallelRMSNorm if normalization == "RMSNorm" else _SequenceParallelLayerNorm


@contextlib.contextmanager
def current_device_is_cpu() -> Iterator[None]:
    """``torch.cuda.current_device()`` answers ``"cpu"``, then is restored.

    The sequence-parallel all-gathers and reduce-scatters, Megatron's global memory buffer, RoPE's frequency table and
    DDP's grad buffers allocate on ``torch.cuda.current_device()``, which raises in a CPU build of torch;
    ``use_cpu_initialization`` covers only the weights.
    """
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"
    try:
        yield
    finally:
        torch.cuda.current_device = original


@contextlib.contextmanager
def _current_stream_is_cpu() -> Iterator[None]:
    """``torch.cuda.current_stream()`` answers torch's CPU stream (whose waits are no-ops), then is restored.

    From megatron-core 0.19, DDP's ``start_grad_sync`` asks for the current CUDA stream on every call, to wait for
    grads a CUDA-graph replay may still be writing; no param carries such an event on CPU, so the stream is only asked
    for. A CPU build of torch raises there, and so does a CUDA build without a GPU.
    """
    original = torch.cuda.current_stream
    torch.cuda.current_stream = lambda device=None: torch.cpu.current_stream()
    try:
        yield
    finally:
        torch.cuda.current_stream = original


@contextlib.contextmanager
def _inference_rng_tracker() -> Iterator[None]:
    """Megatron's RNG tracker is the inference one, whose ``fork()`` is a no-op; the previous tracker comes back after.

    The training tracker seeds, saves and restores CUDA generator states in ``add()`` and ``fork()``, and the
    embedding's sequence-parallel dropout region forks it even at dropout 0. With dropout 0 no random number is
    drawn inside those regions, so skipping the fork changes no value.
    """
    rng = importlib.import_module(RNG_MODULE)
    saved = (rng._CUDA_RNG_STATE_TRACKER, rng._CUDA_RNG_STATE_TRACKER_INITIALIZED)
    rng.initialize_rng_tracker(inference_rng_tracker=True, force_reset=True)
    try:
        yield
    finally:
        rng._CUDA_RNG_STATE_TRACKER, rng._CUDA_RNG_STATE_TRACKER_INITIALIZED = saved


@contextlib.contextmanager
def cpu_workarounds() -> Iterator[None]:
    """Let Megatron's GPT path run on CPU for the duration of the block; to be entered in a rank process only.

    The workarounds are process-wide (a torch attribute and Megatron's RNG tracker global), so they are refused
    outside an initialised process group: in the pytest process they would leak into every other case.
    """
    if not torch.distributed.is_initialized():
        raise RuntimeError("cpu_workarounds() patches process-wide state: enter it in a rank process, after init")
    with current_device_is_cpu(), _current_stream_is_cpu(), _inference_rng_tracker():
        yield


@contextlib.contextmanager
def device_workarounds(device: str) -> Iterator[None]:
    """:func:`cpu_workarounds` on the CPU; on a CUDA device (the rank's own) only the inference RNG tracker."""
    if torch.device(device).type == "cpu":
        with cpu_workarounds():
            yield
        return
    with _inference_rng_tracker():
        yield


def replaced_in_spec(spec: Any, replacements: Mapping[type, type]) -> Any:
    """A copy of a Megatron module spec (dataclasses and lists of them, nested) with every class that is a key of
    ``replacements`` replaced by its value: the local spec's ``WrappedTorchNorm`` by a sequence-parallel norm."""
    if isinstance(spec, type):
        return replacements.get(spec, spec)
    if isinstance(spec, list):
        return [replaced_in_spec(item, replacements) for item in spec]
    if dataclasses.is_dataclass(spec):
        changes = {f.name: replaced_in_spec(getattr(spec, f.name), replacements) for f in dataclasses.fields(spec)}
        return dataclasses.replace(spec, **changes)
    return spec


def _block_spec(qk_layernorm: bool) -> Any:
    """The local GPT block spec, its layers' and final norms all sequence-parallel capable.

    The final layernorm is not part of the layer spec: given a layer spec, ``TransformerBlock`` picks its own module
    default, which is ``WrappedTorchNorm`` again; a block spec names it explicitly.
    """
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.torch_norm import WrappedTorchNorm
    from megatron.core.transformer.transformer_block import TransformerBlock, TransformerBlockSubmodules

    layer = replaced_in_spec(
        get_gpt_layer_local_spec(qk_layernorm=qk_layernorm), {WrappedTorchNorm: _SequenceParallelLayerNorm}
    )
    return ModuleSpec(
        module=TransformerBlock,
        submodules=TransformerBlockSubmodules(
            layer_specs=[layer] * TINY_GPT.num_layers, layer_norm=_SequenceParallelLayerNorm
        ),
    )


def tiny_config_fields(tensor_parallel: int, qk_layernorm: bool) -> dict[str, Any]:
    """The ``TransformerConfig`` fields of the tiny sequence-parallel GPT: what Megatron's config is built from on
    the CPU path, so a patch of the config class is checked against exactly this."""
    return {
        "num_layers": TINY_GPT.num_layers,
        "hidden_size": TINY_GPT.hidden_size,
        "num_attention_heads": TINY_GPT.num_attention_heads,
        "tensor_model_parallel_size": tensor_parallel,
        "sequence_parallel": True,
        "qk_layernorm": qk_layernorm,
        "use_cpu_initialization": True,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "params_dtype": torch.float32,
    }


def build_gpt(qk_layernorm: bool = False, seed: int = 1234, device: str = "cpu") -> tuple[torch.nn.Module, Any]:
    """A tiny sequence-parallel GPT wrapped in Megatron's DDP with fp32 ``main_grad`` buffers, and its config.

    Call inside :func:`device_workarounds`, after ``initialize_model_parallel(tensor_model_parallel_size=2)``; the TP
    size is read from there. Weights are drawn on CPU from ``seed`` as full matrices and then split, so the TP ranks
    hold shards of one model, then moved to ``device``; the caller's torch RNG state is left as it was.
    """
    from megatron.core import parallel_state
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    tensor_parallel = parallel_state.get_tensor_model_parallel_world_size()
    config = TransformerConfig(**tiny_config_fields(tensor_parallel, qk_layernorm))
    ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        gpt = GPTModel(
            config=config,
            transformer_layer_spec=_block_spec(qk_layernorm),
            vocab_size=TINY_GPT.vocab_size,
            max_sequence_length=TINY_GPT.seq_length,
            position_embedding_type="rope",
        )
    gpt.to(device)
    model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=gpt)
    return model, config


def _batch(seed: int, vocab_size: int, seq_length: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Tokens, labels, positions and a causal mask drawn on the CPU from ``seed`` alone, hence identical on every TP
    rank, then moved to ``device``.

    The mask is explicit because the default causal mask upstream builds is allocated on ``"cuda"``.
    """
    generator = torch.Generator().manual_seed(seed)
    shape = (TINY_GPT.micro_batch_size, seq_length)
    causal = torch.ones(seq_length, seq_length).triu(diagonal=1).bool()
    batch = {
        "input_ids": torch.randint(0, vocab_size, shape, generator=generator),
        "labels": torch.randint(0, vocab_size, shape, generator=generator),
        "position_ids": torch.arange(seq_length).expand(shape),
        "attention_mask": causal.expand(TINY_GPT.micro_batch_size, 1, seq_length, seq_length),
    }
    return {name: tensor.to(device) for name, tensor in batch.items()}


def forward_backward(model: torch.nn.Module, seed: int) -> None:
    """One micro-batch drawn from ``seed``, forward and backward, into freshly zeroed grad buffers."""
    gpt = model.module
    model.zero_grad_buffer()
    device = next(gpt.parameters()).device
    losses = model(**_batch(seed, gpt.vocab_size, gpt.max_sequence_length, device))
    losses.mean().backward()


def main_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of each param's ``main_grad`` (else its ``grad``) by name; a param with neither is left out."""
    grads = {}
    for name, param in model.named_parameters():
        grad = getattr(param, "main_grad", None)
        if grad is None:
            grad = param.grad
        if grad is not None:
            grads[name] = grad.detach().clone()
    return grads


def finalize(model: torch.nn.Module) -> None:
    """Upstream's ``finalize_model_grads`` on the one model chunk, as at the end of a training step.

    Every argument the pinned versions added after ``model`` (``num_tokens``, the process-group bundles,
    ``force_all_reduce``) defaults to plain finalization on parallel_state's groups, so one call fits them all.
    """
    importlib.import_module(FINALIZE_MODULE).finalize_model_grads([model])
