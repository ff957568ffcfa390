"""Chunked drop-in replacement for Megatron's ``_allreduce_non_tensor_model_parallel_grads``.

Upstream flattens every selected grad into one buffer per reduce op. This version selects exactly the same grads,
with the same rules, ops and group, but all-reduces them in chunks of at most the configured byte budget, so the
largest temporary buffer is ``max(budget, largest grad)`` instead of the sum of all grads (scaled by the promotion to
the op's widest dtype when grads of different dtypes are reduced together, as upstream does). SUM and AVG are
element-wise, so the result is bitwise identical to upstream's.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch._utils import _unflatten_dense_tensors

from . import megatron_api
from .chunks import split_into_chunks
from .patching import current_budget


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
        for chunk_params, chunk_grads in split_into_chunks(params, grads, budget):
            coalesced = _flatten_as(chunk_grads, dtype)
            torch.distributed.all_reduce(coalesced, op=op, group=group)
            for param, buf, synced in zip(
                chunk_params, chunk_grads, _unflatten_dense_tensors(coalesced, chunk_grads), strict=True
            ):
                buf.copy_(synced)
                use_fsdp = use_fsdp_of[id(param)]
                attr = _grad_attr(module, param, use_fsdp, flag_in_getter)
                original = getattr(param, attr)
                if use_fsdp and megatron_api.fsdp_grads_are_local_tensors(flag_name):
                    setattr(param, attr, original)
                else:
                    setattr(param, attr, module._reshard_if_dtensor(buf, original))
            del coalesced


def _flatten_as(grads: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """One flat buffer in ``dtype``: the dtype upstream's single buffer gets by promoting *all* grads of the op.

    Reducing a chunk of fp16 grads in fp16 while upstream reduced them promoted to fp32 (because some other grad of
    the op was fp32) could change the rounding; flattening every chunk in the op-wide dtype keeps it bitwise.
    """
    return torch.cat([g.contiguous().view(-1).to(dtype) for g in grads])


def _grad_attr(module: Any, param: torch.nn.Parameter, use_fsdp: bool, flag_in_getter: bool) -> str:
    if flag_in_getter:
        return module._get_main_grad_attr(param, use_fsdp)
    return module._get_main_grad_attr(param)
