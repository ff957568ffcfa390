"""Bounded-memory replacement of Megatron's all-reduce of non-tensor-parallel grads.

Megatron's ``finalize_model_grads`` all-reduces the grads tensor-parallel ranks share (layernorms under sequence
parallelism, qk-layernorms, params marked ``average_gradients_across_tp_domain``) through
``_allreduce_non_tensor_model_parallel_grads``, which flattens all of them into one buffer per reduce op. The
replacement here selects the same grads and reduces them in chunks of at most ``GRAD_COALESCE_CHUNK_BYTES``.

Importing this module only reads the budget from ``MODERNRL_GRAD_COALESCE_CHUNK_BYTES``. The trainer calls
:func:`apply_grad_chunking_patch`; :func:`remove_grad_chunking_patch` puts Megatron's own functions back.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
from typing import Any

import torch
from torch._utils import _unflatten_dense_tensors

from modernrl.utils.logging_utils import get_logger

logger = get_logger(__name__)

GRAD_COALESCE_CHUNK_BYTES = int(os.environ.get("MODERNRL_GRAD_COALESCE_CHUNK_BYTES", 1 << 30))

FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
DDP_CONFIG_MODULE = "megatron.core.distributed.distributed_data_parallel_config"

# Megatron's functions replaced by apply_grad_chunking_patch, saved by its first call.
_saved_originals: dict[str, Any] = {}


def _split_into_chunks(params, grads, chunk_bytes):
    """Consecutive ``(params, grads)`` chunks, each as full as ``chunk_bytes`` allows; an oversized grad goes alone."""
    chunks = []
    start, filled = 0, 0
    for index, grad in enumerate(grads):
        nbytes = grad.numel() * grad.element_size()
        if index > start and (chunk_bytes <= 0 or filled + nbytes > chunk_bytes):
            chunks.append((list(params[start:index]), list(grads[start:index])))
            start, filled = index, 0
        filled += nbytes
    if start < len(grads):
        chunks.append((list(params[start:]), list(grads[start:])))
    return chunks


def _megatron_finalize():
    # The module, not the function ``megatron.core.distributed`` re-exports under the same name.
    return importlib.import_module(FINALIZE_MODULE)


@dataclasses.dataclass
class _Selected:
    """Grads of one reduce op, with where each came from (param, grad attribute, whether it is a local shard)."""

    op: Any
    sources: list = dataclasses.field(default_factory=list)
    grads: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _MegatronShape:
    """What the installed Megatron's all-reduce looks like, probed from its objects rather than its version."""

    fsdp_flag: str  # DDP-config field upstream reads: use_megatron_fsdp (0.14+) or use_custom_fsdp (0.13)
    fsdp_grads_local: bool  # use_megatron_fsdp: upstream reduces grad._local_tensor and rebinds the grad unchanged
    grad_attr_takes_flag: bool  # _get_main_grad_attr(param, use_fsdp) on 0.13/0.14, (param) from 0.15

    @classmethod
    def probe(cls, finalize) -> _MegatronShape:
        ddp_module = importlib.import_module(DDP_CONFIG_MODULE)
        fields = {f.name for f in dataclasses.fields(ddp_module.DistributedDataParallelConfig)}
        flag = "use_megatron_fsdp" if "use_megatron_fsdp" in fields else "use_custom_fsdp"
        takes_flag = len(inspect.signature(finalize._get_main_grad_attr).parameters) >= 2
        return cls(flag, flag == "use_megatron_fsdp", takes_flag)


def _resolve_tp_group(finalize, tp_group):
    if hasattr(finalize, "get_tensor_model_parallel_group_if_none"):  # 0.14+
        return finalize.get_tensor_model_parallel_group_if_none(tp_group)
    if tp_group is not None:
        return tp_group
    from megatron.core import parallel_state  # 0.13: no tp_group argument upstream

    return parallel_state.get_tensor_model_parallel_group()


def chunked_allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    """All-reduce the grads upstream's ``_allreduce_non_tensor_model_parallel_grads`` reduces, with the same ops on
    the same group, in chunks of at most ``GRAD_COALESCE_CHUNK_BYTES``. ``None`` grads are skipped."""
    finalize = _megatron_finalize()
    group = _resolve_tp_group(finalize, tp_group)
    if group.size() <= 1:
        return
    shape = _MegatronShape.probe(finalize)
    summed = _Selected(torch.distributed.ReduceOp.SUM)
    averaged = _Selected(torch.distributed.ReduceOp.AVG)
    for model_chunk in model:
        use_fsdp = bool(getattr(model_chunk.ddp_config, shape.fsdp_flag))
        local = use_fsdp and shape.fsdp_grads_local
        for name, param in finalize.get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                selected = averaged
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                selected = summed
            else:
                continue
            if shape.grad_attr_takes_flag:
                attr = finalize._get_main_grad_attr(param, use_fsdp)
            else:
                attr = finalize._get_main_grad_attr(param)
            grad = getattr(param, attr)
            if grad is None:
                continue
            selected.sources.append((param, attr, local))
            selected.grads.append(grad._local_tensor.data if local else finalize._unshard_if_dtensor(grad).data)

    budget = GRAD_COALESCE_CHUNK_BYTES
    for selected in (summed, averaged):
        if selected.grads:
            _reduce_selected(finalize, selected, group, budget)


def _reduce_selected(finalize, selected, group, budget):
    """One op's grads, chunk by chunk; each param then gets its grad back as upstream gives it (resharded)."""
    # The dtype upstream's one coalesced buffer gets (torch.cat promotes over all of the op's grads).
    dtype = selected.grads[0].dtype
    for grad in selected.grads[1:]:
        dtype = torch.promote_types(dtype, grad.dtype)
    chunks = _split_into_chunks(selected.sources, selected.grads, budget)
    # Chunks are flattened in turn into one buffer of the op, big enough for the largest: with a fresh one per chunk
    # the previous chunk's can still be held by the backend's worker thread when the next is allocated.
    sizes = [[g.numel() for g in grads] for _, grads in chunks]
    coalesced = [not _reducible_in_place(grads, dtype) for _, grads in chunks]
    flat_numel = max((sum(s) for s, c in zip(sizes, coalesced, strict=True) if c), default=0)
    staging = torch.empty(flat_numel, dtype=dtype, device=selected.grads[0].device) if any(coalesced) else None
    for (sources, grads), numels, coalesce in zip(chunks, sizes, coalesced, strict=True):
        if coalesce:
            _reduce_chunk(staging[: sum(numels)], grads, numels, selected.op, group)
        else:
            torch.distributed.all_reduce(grads[0], op=selected.op, group=group)
        for (param, attr, local), buf in zip(sources, grads, strict=True):
            current = getattr(param, attr)
            setattr(param, attr, current if local else finalize._reshard_if_dtensor(buf, current))


def _reducible_in_place(grads, dtype):
    """A lone contiguous grad of the op's dtype is its own flat buffer (as ``_flatten_dense_tensors`` would make it)."""
    return len(grads) == 1 and grads[0].dtype == dtype and grads[0].is_contiguous()


def _reduce_chunk(flat, grads, numels, op, group):
    """Flatten ``grads`` into ``flat`` (casting to its dtype), all-reduce it, copy the result back."""
    for piece, grad in zip(flat.split(numels), grads, strict=True):
        piece.view_as(grad).copy_(grad)
    torch.distributed.all_reduce(flat, op=op, group=group)
    for grad, synced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
        grad.copy_(synced)


def apply_grad_chunking_patch(chunk_bytes=None):
    """Bind the chunked all-reduce in Megatron's place (and its ``_allreduce_layernorm_grads`` alias where the
    installed Megatron has it). Repeated calls keep the originals from the first; ``chunk_bytes`` sets the budget."""
    global GRAD_COALESCE_CHUNK_BYTES
    if chunk_bytes is not None:
        GRAD_COALESCE_CHUNK_BYTES = int(chunk_bytes)
    finalize = _megatron_finalize()
    first = not _saved_originals
    if first:
        _saved_originals["_allreduce_non_tensor_model_parallel_grads"] = (
            finalize._allreduce_non_tensor_model_parallel_grads
        )
        if hasattr(finalize, "_allreduce_layernorm_grads"):
            _saved_originals["_allreduce_layernorm_grads"] = finalize._allreduce_layernorm_grads
    finalize._allreduce_non_tensor_model_parallel_grads = chunked_allreduce_non_tensor_model_parallel_grads
    if "_allreduce_layernorm_grads" in _saved_originals:
        finalize._allreduce_layernorm_grads = chunked_allreduce_non_tensor_model_parallel_grads
    if first:
        logger.info("applied chunked grad all-reduce (chunk budget %d bytes)", GRAD_COALESCE_CHUNK_BYTES)


def remove_grad_chunking_patch():
    """Put back the functions :func:`apply_grad_chunking_patch` replaced; a no-op when it was not applied."""
    if not _saved_originals:
        return
    finalize = _megatron_finalize()
    for name, original in _saved_originals.items():
        setattr(finalize, name, original)
    _saved_originals.clear()
    logger.info("removed chunked grad all-reduce")
