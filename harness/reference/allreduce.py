"""Chunked drop-in replacement for Megatron's ``_allreduce_non_tensor_model_parallel_grads``.

Upstream flattens every selected grad into one buffer per reduce op. This version selects exactly the same grads,
with the same rules, ops and group, but all-reduces them in chunks of at most the configured byte budget, so the
largest temporary buffer is ``max(budget, largest grad)`` instead of the sum of all grads (scaled by the promotion to
the op's widest dtype when grads of different dtypes are reduced together, as upstream does). Every chunk is
flattened in that op-wide dtype, the one upstream's single buffer gets, so an fp16 grad reduced next to fp32 ones is
rounded as upstream rounds it. SUM and AVG are element-wise, so the result is bitwise identical to upstream's.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import torch
from torch._utils import _unflatten_dense_tensors

from . import megatron_api
from .budget import current_budget
from .chunks import split_into_chunks, tensor_bytes

IN_PLACE_BYTES = 4 << 20
# Measured on gloo, 2 ranks, 64 grads of 8 MiB: 0.33 s with two reductions in flight, 0.38-0.44 s one at a time;
# more in flight gained nothing.
IN_PLACE_IN_FLIGHT = 2


def allreduce_non_tensor_model_parallel_grads(model: list[torch.nn.Module], config: Any, tp_group: Any = None) -> None:
    """All-reduce sequence-parallel, qk-layernorm (SUM) and TP-averaged (AVG) grads across TP ranks, in chunks.

    Grads that are ``None`` are skipped on every target, including those whose upstream would fail on them.
    """
    module = megatron_api.finalize_module()
    group = megatron_api.resolve_tp_group(module, tp_group)
    if group.size() <= 1:
        return
    flag_name = megatron_api.fsdp_flag_name()
    flag_in_getter = megatron_api.main_grad_attr_takes_fsdp_flag(module)

    local_fsdp_grads = megatron_api.fsdp_grads_are_local_tensors(flag_name)
    # Per op: each selected param, the attribute its grad lives in (resolved once), and the tensor to reduce.
    selected: dict[Any, tuple[list[tuple[torch.nn.Parameter, str, bool]], list[torch.Tensor]]] = {
        torch.distributed.ReduceOp.SUM: ([], []),
        torch.distributed.ReduceOp.AVG: ([], []),
    }
    for model_chunk in model:
        use_fsdp = bool(getattr(model_chunk.ddp_config, flag_name))
        named_parameters = module.get_attr_wrapped_model(model_chunk, "named_parameters")
        for name, param in named_parameters():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                op = torch.distributed.ReduceOp.AVG
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                op = torch.distributed.ReduceOp.SUM
            else:
                continue
            attr = _grad_attr(module, param, use_fsdp, flag_in_getter, local_fsdp_grads)
            grad = getattr(param, attr)
            if grad is None:
                continue
            local = use_fsdp and local_fsdp_grads
            data = grad._local_tensor.data if local else module._unshard_if_dtensor(grad).data
            params, grads = selected[op]
            params.append((param, attr, local))
            grads.append(data)

    budget = current_budget()
    for op, (params, grads) in selected.items():
        if not grads:
            continue
        dtype = functools.reduce(torch.promote_types, {g.dtype for g in grads})
        chunks = _pack(params, grads, dtype, budget)
        targets = [_in_place_target(chunk_grads, dtype) for _, chunk_grads in chunks]
        staging = _staging_buffer(chunks, targets, dtype)
        in_flight: list[Any] = []
        for (_, chunk_grads), target in zip(chunks, targets, strict=True):
            if target is not None:
                # Two in-place reductions in flight: the next one is queued while the backend works on this one.
                in_flight.append(torch.distributed.all_reduce(target, op=op, group=group, async_op=True))
                if len(in_flight) >= IN_PLACE_IN_FLIGHT:
                    in_flight.pop(0).wait()
            else:
                flat = staging[: sum(g.numel() for g in chunk_grads)]
                torch.cat([g.view(-1) if g.is_contiguous() else g.reshape(-1) for g in chunk_grads], out=flat)
                torch.distributed.all_reduce(flat, op=op, group=group)
                for buf, synced in zip(chunk_grads, _unflatten_dense_tensors(flat, chunk_grads), strict=True):
                    buf.copy_(synced)
        for work in in_flight:
            work.wait()
        del staging
        for chunk_params, chunk_grads in chunks:
            for (param, attr, local), buf in zip(chunk_params, chunk_grads, strict=True):
                original = getattr(param, attr)
                setattr(param, attr, original if local else module._reshard_if_dtensor(buf, original))


def _reducible_in_place(chunk_grads: list[torch.Tensor], dtype: torch.dtype) -> bool:
    """A chunk of one contiguous grad already in the op's dtype is reduced where it lies: copying it into a buffer
    and back would give the same bits at twice the memory traffic."""
    return len(chunk_grads) == 1 and chunk_grads[0].dtype == dtype and chunk_grads[0].is_contiguous()


def _in_place_target(chunk_grads: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor | None:
    """The tensor that reduces the chunk where it lies, or ``None`` when it must be copied into the staging buffer:
    the grad itself (:func:`_reducible_in_place`), or one flat view of the memory the chunk's grads tile exactly.

    Megatron's ``main_grad``s are views of one contiguous grad buffer, so consecutive selected grads often lie side
    by side (in either order); reducing the region they cover moves the same bytes in one collective with no copy.
    Every non-empty grad must be contiguous, in the op's dtype, in the same storage, and the grads sorted by address
    must follow one another without gap or overlap (empty grads hold nothing to reduce).
    """
    if _reducible_in_place(chunk_grads, dtype):
        return chunk_grads[0]
    present = sorted((g for g in chunk_grads if g.numel()), key=lambda g: g.data_ptr())
    if not present or any(g.dtype != dtype or not g.is_contiguous() for g in present):
        return None
    for before, after in itertools.pairwise(present):
        if before.data_ptr() + tensor_bytes(before) != after.data_ptr():
            return None
    # Side by side, the grads tile one region; it is the first grad's storage only if it ends within that storage.
    first, last = present[0], present[-1]
    storage = first.untyped_storage()
    if last.data_ptr() + tensor_bytes(last) > storage.data_ptr() + storage.nbytes():
        return None
    return first.as_strided((sum(g.numel() for g in present),), (1,), first.storage_offset())


def _pack(params: list, grads: list[torch.Tensor], dtype: torch.dtype, budget: int) -> list[tuple[list, list]]:
    """The op's chunks: a large grad (contiguous, in the op's dtype) alone and in place, the others packed.

    A grad is large from ``IN_PLACE_BYTES`` on, or from half the budget: coalescing exists to amortise a collective's
    fixed cost over small grads, and above a few MiB that cost is negligible next to the transfer on gloo and NCCL
    alike, while copying the grad into a buffer and back doubles the memory traffic. A grad of half the budget could
    share a chunk with one other grad at most, so coalescing it saves at most one collective.
    """
    chunks: list[tuple[list, list]] = []
    pending_params: list = []
    pending_grads: list[torch.Tensor] = []
    threshold = min(IN_PLACE_BYTES, (budget + 1) // 2)
    for param, grad in zip(params, grads, strict=True):
        if tensor_bytes(grad) >= threshold and _reducible_in_place([grad], dtype):
            chunks.append(([param], [grad]))
        else:
            pending_params.append(param)
            pending_grads.append(grad)
    return chunks + split_into_chunks(pending_params, pending_grads, budget) if pending_grads else chunks


def _staging_buffer(
    chunks: list[tuple[list, list[torch.Tensor]]], targets: list[torch.Tensor | None], dtype: torch.dtype
) -> torch.Tensor:
    """One buffer, sized for the largest chunk that needs copying (no in-place ``targets``), that every chunk of the
    op reuses.

    Allocating a fresh buffer per chunk would touch (and fault in) new pages for every chunk, and leaves the
    allocator holding several budgets' worth of freed memory; one buffer costs one budget, once.
    """
    staged = [grads for (_, grads), target in zip(chunks, targets, strict=True) if target is None]
    sizes = [sum(g.numel() for g in grads) for grads in staged]
    device = chunks[0][1][0].device if chunks else None
    return torch.empty(max(sizes, default=0), dtype=dtype, device=device)


def _grad_attr(
    module: Any, param: torch.nn.Parameter, use_fsdp: bool, flag_in_getter: bool, local_fsdp_grads: bool
) -> str:
    """The attribute upstream reads a grad from: its getter's answer, called as upstream calls it. Where the getter
    takes no flag but FSDP keeps grads apart (the ``use_custom_fsdp`` shape), upstream's callers pick
    ``fsdp_managed_main_grad`` themselves, as the getter that took the flag did."""
    if flag_in_getter:
        return module._get_main_grad_attr(param, use_fsdp)
    if use_fsdp and not local_fsdp_grads:
        return "fsdp_managed_main_grad"
    return module._get_main_grad_attr(param)
