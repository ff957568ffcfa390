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
from typing import Any

import torch

from . import megatron_api
from .chunks import split_into_chunks, tensor_bytes
from .patching import current_budget

IN_PLACE_BYTES = 4 << 20


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

    selected: dict[Any, tuple[list[torch.nn.Parameter], list[torch.Tensor], list[bool]]] = {
        torch.distributed.ReduceOp.SUM: ([], [], []),
        torch.distributed.ReduceOp.AVG: ([], [], []),
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
            grad = getattr(param, _grad_attr(module, param, use_fsdp, flag_in_getter))
            if grad is None:
                continue
            if use_fsdp and megatron_api.fsdp_grads_are_local_tensors(flag_name):
                data = grad._local_tensor.data
            else:
                data = module._unshard_if_dtensor(grad).data
            params, grads, fsdp_flags = selected[op]
            params.append(param)
            grads.append(data)
            fsdp_flags.append(use_fsdp)

    budget = current_budget()
    for op, (params, grads, fsdp_flags) in selected.items():
        if not grads:
            continue
        use_fsdp_of = dict(zip(map(id, params), fsdp_flags, strict=True))
        dtype = functools.reduce(torch.promote_types, (g.dtype for g in grads))
        chunks = _pack(params, grads, dtype, budget)
        staging = _staging_buffer(chunks, dtype)
        for chunk_params, chunk_grads in chunks:
            if _reducible_in_place(chunk_grads, dtype):
                torch.distributed.all_reduce(chunk_grads[0], op=op, group=group)
            else:
                flat = staging[: sum(g.numel() for g in chunk_grads)]
                torch.cat([g.reshape(-1).to(dtype) for g in chunk_grads], out=flat)
                torch.distributed.all_reduce(flat, op=op, group=group)
                for buf, synced in zip(chunk_grads, flat.split([g.numel() for g in chunk_grads]), strict=True):
                    buf.copy_(synced.view_as(buf))
            for param, buf in zip(chunk_params, chunk_grads, strict=True):
                use_fsdp = use_fsdp_of[id(param)]
                attr = _grad_attr(module, param, use_fsdp, flag_in_getter)
                original = getattr(param, attr)
                if use_fsdp and megatron_api.fsdp_grads_are_local_tensors(flag_name):
                    setattr(param, attr, original)
                else:
                    setattr(param, attr, module._reshard_if_dtensor(buf, original))
        del staging


def _reducible_in_place(chunk_grads: list[torch.Tensor], dtype: torch.dtype) -> bool:
    """A chunk of one contiguous grad already in the op's dtype is reduced where it lies: copying it into a buffer
    and back would give the same bits at twice the memory traffic."""
    return len(chunk_grads) == 1 and chunk_grads[0].dtype == dtype and chunk_grads[0].is_contiguous()


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


def _staging_buffer(chunks: list[tuple[list, list[torch.Tensor]]], dtype: torch.dtype) -> torch.Tensor:
    """One buffer, sized for the largest chunk that needs copying, that every chunk of the op reuses.

    Allocating a fresh buffer per chunk would touch (and fault in) new pages for every chunk, and leaves the
    allocator holding several budgets' worth of freed memory; one buffer costs one budget, once.
    """
    sizes = [sum(g.numel() for g in grads) for _, grads in chunks if not _reducible_in_place(grads, dtype)]
    return torch.empty(max(sizes, default=0), dtype=dtype)


def _grad_attr(module: Any, param: torch.nn.Parameter, use_fsdp: bool, flag_in_getter: bool) -> str:
    if flag_in_getter:
        return module._get_main_grad_attr(param, use_fsdp)
    return module._get_main_grad_attr(param)
