"""Chunked all-reduce of the non-tensor-parallel grads (layernorms under sequence parallelism, qk-layernorms,
TP-averaged params), patched into Megatron when this module is imported.

Megatron's ``_allreduce_non_tensor_model_parallel_grads`` flattens every selected grad into one buffer per reduce op;
on large models that buffer alone can run the GPU out of memory. This replacement selects the same grads and reduces
them chunk after chunk, each chunk at most ``GRAD_COALESCE_CHUNK_BYTES`` (a grad larger than that goes alone).

Importing the module rebinds Megatron's function (and its ``_allreduce_layernorm_grads`` alias where the installed
Megatron still has it). There is no way back: the originals are not kept.
"""

import dataclasses
import functools
import importlib
import inspect
import os
import warnings

import torch
from torch._utils import _unflatten_dense_tensors

from legacyrl.utils.logging_utils import get_logger

logger = get_logger(__name__)

GRAD_COALESCE_CHUNK_BYTES = int(os.environ.get("LEGACYRL_GRAD_COALESCE_CHUNK_BYTES", 1 << 30))

_FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
_DDP_CONFIG_MODULE = "megatron.core.distributed.distributed_data_parallel_config"


def _split_into_chunks(params, grads, chunk_bytes):
    """Greedy, in order: a chunk closes when the next grad would take it over ``chunk_bytes``."""
    chunks = []
    chunk_params, chunk_grads, used = [], [], 0
    for param, grad in zip(params, grads, strict=True):
        size = grad.numel() * grad.element_size()
        if chunk_grads and (chunk_bytes <= 0 or used + size > chunk_bytes):
            chunks.append((chunk_params, chunk_grads))
            chunk_params, chunk_grads, used = [], [], 0
        chunk_params.append(param)
        chunk_grads.append(grad)
        used += size
    if chunk_grads:
        chunks.append((chunk_params, chunk_grads))
    return chunks


def _finalize_model_grads_module():
    # Not ``from megatron.core.distributed import finalize_model_grads``: the package re-exports the function of
    # that name, which shadows the module.
    return importlib.import_module(_FINALIZE_MODULE)


def _tp_group(fmg, tp_group):
    """The group upstream reduces over: the given one (0.14+ resolves None through Megatron's helper)."""
    resolve = getattr(fmg, "get_tensor_model_parallel_group_if_none", None)
    if resolve is not None:
        return resolve(tp_group)
    if tp_group is not None:
        return tp_group
    from megatron.core import parallel_state

    return parallel_state.get_tensor_model_parallel_group()


def _fsdp_flag():
    """The DDP-config flag upstream's all-reduce reads: ``use_megatron_fsdp`` (0.14+) or ``use_custom_fsdp`` (0.13)."""
    ddp_config_module = importlib.import_module(_DDP_CONFIG_MODULE)
    names = {field.name for field in dataclasses.fields(ddp_config_module.DistributedDataParallelConfig)}
    return "use_megatron_fsdp" if "use_megatron_fsdp" in names else "use_custom_fsdp"


def _main_grad_attr_takes_fsdp_flag(fmg):
    # 0.13/0.14 take the FSDP flag (0.13 then answers "fsdp_managed_main_grad"); 0.15+ take the param only.
    return len(inspect.signature(fmg._get_main_grad_attr).parameters) > 1


def chunked_allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    """Drop-in for Megatron's ``_allreduce_non_tensor_model_parallel_grads``, reducing in bounded chunks.

    Params whose grad is ``None`` are skipped (0.13's upstream would fail on them).
    """
    fmg = _finalize_model_grads_module()
    group = _tp_group(fmg, tp_group)
    if group.size() <= 1:
        return
    fsdp_flag = _fsdp_flag()
    # Under use_megatron_fsdp upstream reduces the local shard in place and rebinds the grad unchanged.
    fsdp_reduces_local_shard = fsdp_flag == "use_megatron_fsdp"
    getter_takes_flag = _main_grad_attr_takes_fsdp_flag(fmg)

    sum_entries, sum_grads, avg_entries, avg_grads = [], [], [], []
    for model_chunk in model:
        use_fsdp = bool(getattr(model_chunk.ddp_config, fsdp_flag))
        local = use_fsdp and fsdp_reduces_local_shard
        for name, param in fmg.get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                entries, grads = avg_entries, avg_grads
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                entries, grads = sum_entries, sum_grads
            else:
                continue
            attr = fmg._get_main_grad_attr(param, use_fsdp) if getter_takes_flag else fmg._get_main_grad_attr(param)
            grad = getattr(param, attr)
            if grad is None:
                continue
            data = grad._local_tensor.data if local else fmg._unshard_if_dtensor(grad).data
            entries.append((param, attr, local))
            grads.append(data)

    budget = GRAD_COALESCE_CHUNK_BYTES
    for entries, grads, op in (
        (sum_entries, sum_grads, torch.distributed.ReduceOp.SUM),
        (avg_entries, avg_grads, torch.distributed.ReduceOp.AVG),
    ):
        if grads:
            _allreduce_in_chunks(fmg, entries, grads, op, group, budget)


def _allreduce_in_chunks(fmg, entries, grads, op, group, budget):
    """All-reduce one op's grads chunk after chunk, then give each param its grad back (resharded if a DTensor)."""
    # Upstream's single buffer has the dtype all of the op's grads promote to; every chunk is flattened in it, so a
    # chunk holding only fp16 grads of a mixed op rounds exactly as upstream does.
    dtype = functools.reduce(torch.promote_types, (g.dtype for g in grads))
    chunks = _split_into_chunks(entries, grads, budget)
    # One flat buffer per op, sized for its largest chunk, that every chunk is flattened into in turn: a fresh buffer
    # per chunk would briefly hold two, since the backend (gloo's worker thread) may still reference the previous
    # one when all_reduce has returned.
    flat_sizes = [sum(g.numel() for g in chunk_grads) for _, chunk_grads in chunks if not _in_place(chunk_grads, dtype)]
    buffer = torch.empty(max(flat_sizes, default=0), dtype=dtype, device=grads[0].device)
    for chunk_entries, chunk_grads in chunks:
        if _in_place(chunk_grads, dtype):
            # A lone contiguous grad of the op's dtype: what _flatten_dense_tensors would give is the grad itself.
            torch.distributed.all_reduce(chunk_grads[0], op=op, group=group)
        else:
            flat = buffer[: sum(g.numel() for g in chunk_grads)]
            for piece, grad in zip(flat.split([g.numel() for g in chunk_grads]), chunk_grads, strict=True):
                piece.view_as(grad).copy_(grad)
            torch.distributed.all_reduce(flat, op=op, group=group)
            for grad, synced in zip(chunk_grads, _unflatten_dense_tensors(flat, chunk_grads), strict=True):
                grad.copy_(synced)
        for (param, attr, is_local), buf in zip(chunk_entries, chunk_grads, strict=True):
            original = getattr(param, attr)
            setattr(param, attr, original if is_local else fmg._reshard_if_dtensor(buf, original))


def _in_place(chunk_grads, dtype):
    return len(chunk_grads) == 1 and chunk_grads[0].dtype == dtype and chunk_grads[0].is_contiguous()


try:
    _fmg = importlib.import_module(_FINALIZE_MODULE)
except ImportError as _err:
    warnings.warn(f"legacyrl: megatron is not importable ({_err}); grad all-reduce chunking not applied", stacklevel=2)
else:
    _fmg._allreduce_non_tensor_model_parallel_grads = chunked_allreduce_non_tensor_model_parallel_grads
    if hasattr(_fmg, "_allreduce_layernorm_grads"):
        _fmg._allreduce_layernorm_grads = chunked_allreduce_non_tensor_model_parallel_grads
    logger.info("applied chunked grad all-reduce (chunk budget %d bytes)", GRAD_COALESCE_CHUNK_BYTES)
