"""Chunked all-reduce of Megatron's non-tensor-parallel grads.

Upstream ``megatron.core.distributed.finalize_model_grads.
_allreduce_non_tensor_model_parallel_grads`` (alias ``_allreduce_layernorm_grads``)
flattens every selected grad into ONE coalesced buffer per reduce op.  The
replacement built here selects exactly the same grads, with the same reduce op,
grad attribute and dtype semantics, but all-reduces them in chunks whose buffer
is at most ``budget_bytes``.

Nothing here imports torch or Megatron at module import time.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
from typing import TYPE_CHECKING, Callable, List, NamedTuple, Optional, Sequence

from .registry import AttrPatch, register_patch

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "Segment",
    "DEFAULT_GRAD_CHUNK_BYTES",
    "GRAD_CHUNK_BYTES_ENV",
    "FMG_MODULE",
    "split_into_chunks",
    "allreduce_in_chunks",
    "resolve_grad_chunk_bytes",
    "make_chunked_allreduce",
]

FMG_MODULE = "megatron.core.distributed.finalize_model_grads"
GRAD_CHUNK_BYTES_ENV = "FINCH_GRAD_CHUNK_BYTES"
DEFAULT_GRAD_CHUNK_BYTES = 128 * 1024 * 1024  # 128 MiB


def _log():
    import logging

    return logging.getLogger("finch.mcore.grad_allreduce")


class Segment(NamedTuple):
    """Elements ``[start, stop)`` of the flattened tensor ``tensors[index]``."""

    index: int
    start: int
    stop: int


def _promoted_dtype(tensors: Sequence["torch.Tensor"]):
    import torch

    return functools.reduce(torch.promote_types, (t.dtype for t in tensors))


def split_into_chunks(
    tensors: Sequence["torch.Tensor"], budget_bytes: int, dtype=None
) -> List[List[Segment]]:
    """Split ``tensors`` into chunks whose flattened buffer is at most ``budget_bytes``.

    The buffer dtype is ``dtype`` (default: the promoted dtype of all ``tensors``,
    which is what ``torch._utils._flatten_dense_tensors`` would produce), so the
    budget is ``numel * element_size`` of that dtype.

    Returns a list of chunks, each a non-empty list of :class:`Segment`; walking
    the chunks in order visits every element of every tensor exactly once, in
    the input order.  Contiguous tensors are cut wherever a chunk is full (a
    tensor larger than the budget is spread over several chunks).  A
    non-contiguous tensor is never cut: it starts a new chunk when it does not
    fit, and if it alone exceeds the budget it gets a chunk of its own that is
    over budget (the only case where the budget is exceeded).  Zero-element
    tensors get a ``Segment(i, 0, 0)``.  An empty input returns ``[]``.
    Raises ``ValueError`` if the budget is smaller than one element.
    """
    import torch

    if not tensors:
        return []
    if isinstance(budget_bytes, bool) or int(budget_bytes) != budget_bytes or budget_bytes <= 0:
        raise ValueError(f"finch: budget_bytes must be a positive integer, got {budget_bytes!r}")
    if dtype is None:
        dtype = _promoted_dtype(tensors)
    itemsize = torch.empty((), dtype=dtype).element_size()
    cap = int(budget_bytes) // itemsize
    if cap < 1:
        raise ValueError(
            f"finch: budget of {budget_bytes} bytes is smaller than one {dtype} element"
        )

    chunks: List[List[Segment]] = []
    cur: List[Segment] = []
    room = cap

    def close():
        nonlocal cur, room
        if cur:
            chunks.append(cur)
        cur, room = [], cap

    for i, t in enumerate(tensors):
        n = t.numel()
        if n <= room:
            cur.append(Segment(i, 0, n))
            room -= n
            continue
        if not t.is_contiguous():
            close()
            if n <= cap:
                cur.append(Segment(i, 0, n))
                room = cap - n
            else:
                chunks.append([Segment(i, 0, n)])
            continue
        start = 0
        while n - start > room:
            if room > 0:
                cur.append(Segment(i, start, start + room))
                start += room
            close()
        cur.append(Segment(i, start, n))
        room -= n - start
    close()
    return chunks


def allreduce_in_chunks(
    tensors: Sequence["torch.Tensor"],
    budget_bytes: int,
    op=None,
    group=None,
    on_tensor_done: Optional[Callable[[int], None]] = None,
    dtype=None,
) -> int:
    """All-reduce ``tensors`` in place, chunk by chunk (see :func:`split_into_chunks`).

    Each chunk is packed into a buffer of the promoted dtype of *all* tensors
    (upstream's coalesced dtype), reduced with ``torch.distributed.all_reduce(buf,
    op=op, group=group)`` and copied back (``copy_`` casts back to each tensor's
    dtype, as upstream's ``buf.copy_(synced)``).  ``on_tensor_done(i)`` is called
    once tensor ``i`` has been completely written back.  Returns the number of
    all-reduce calls issued.
    """
    import torch

    if not tensors:
        return 0
    if op is None:
        op = torch.distributed.ReduceOp.SUM
    if dtype is None:
        dtype = _promoted_dtype(tensors)
    calls = 0
    for chunk in split_into_chunks(tensors, budget_bytes, dtype):
        first = tensors[chunk[0].index]
        if (
            len(chunk) == 1
            and chunk[0].start == 0
            and chunk[0].stop == first.numel()
            and first.dtype == dtype
            and first.is_contiguous()
        ):
            # Whole tensor, right dtype: reduce in place, no staging buffer.
            torch.distributed.all_reduce(first.view(-1), op=op, group=group)
            calls += 1
            if on_tensor_done is not None:
                on_tensor_done(chunk[0].index)
            continue
        numel = sum(s.stop - s.start for s in chunk)
        flat = torch.empty(numel, dtype=dtype, device=first.device)
        off = 0
        for s in chunk:
            n = s.stop - s.start
            if n:
                flat[off : off + n].copy_(tensors[s.index].reshape(-1)[s.start : s.stop])
            off += n
        torch.distributed.all_reduce(flat, op=op, group=group)
        calls += 1
        off = 0
        for s in chunk:
            t = tensors[s.index]
            n = s.stop - s.start
            if n:
                src = flat[off : off + n]
                if t.is_contiguous():
                    t.view(-1)[s.start : s.stop].copy_(src)
                else:  # never cut: the segment is the whole tensor
                    t.copy_(src.view(t.shape))
            off += n
            if s.stop == t.numel() and on_tensor_done is not None:
                on_tensor_done(s.index)
        del flat
    return calls


def _parse_bytes(value, source: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"finch: {source} must be a positive integer of bytes, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        try:
            value = int(value.strip().replace("_", ""))
        except ValueError:
            raise ValueError(
                f"finch: {source} must be a positive integer of bytes, got {value!r}"
            ) from None
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"finch: {source} must be a positive integer of bytes, got {value!r}")
    return value


def resolve_grad_chunk_bytes(args) -> int:
    """Byte budget: ``args.grad_chunk_bytes``; if missing/None, ``$FINCH_GRAD_CHUNK_BYTES``
    (read now); if unset/empty, :data:`DEFAULT_GRAD_CHUNK_BYTES`."""
    value = getattr(args, "grad_chunk_bytes", None)
    if value is not None:
        return _parse_bytes(value, "args.grad_chunk_bytes")
    env = os.environ.get(GRAD_CHUNK_BYTES_ENV)
    if env is not None and env.strip():
        return _parse_bytes(env, GRAD_CHUNK_BYTES_ENV)
    return DEFAULT_GRAD_CHUNK_BYTES


def make_chunked_allreduce(fmg, original, budget_bytes: int):
    """Build the replacement for ``fmg._allreduce_non_tensor_model_parallel_grads``.

    ``fmg`` is the ``finalize_model_grads`` module; its helpers
    (``_get_main_grad_attr``, ``_unshard_if_dtensor``, ``_reshard_if_dtensor``,
    ``get_attr_wrapped_model``, the TP group lookup) are looked up on it at call
    time, so the replacement follows whatever the installed version does.
    """
    budget_bytes = _parse_bytes(budget_bytes, "budget_bytes")
    # megatron-core >= 0.14 style: (model, config, tp_group=None), skips None grads,
    # knows ddp_config.use_megatron_fsdp.  0.13 style: (model, config), TP group from
    # parallel_state, _get_main_grad_attr(param, use_custom_fsdp).
    modern = "tp_group" in inspect.signature(original).parameters
    legacy_fsdp_arg = "use_custom_fsdp" in inspect.signature(fmg._get_main_grad_attr).parameters

    def grad_attr_of(param, ddp_config):
        if legacy_fsdp_arg:
            return fmg._get_main_grad_attr(param, ddp_config.use_custom_fsdp)
        return fmg._get_main_grad_attr(param)

    def chunked_allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
        """finch: chunked drop-in for Megatron's _allreduce_non_tensor_model_parallel_grads."""
        import torch

        if modern:
            tp_group = fmg.get_tensor_model_parallel_group_if_none(tp_group)
            if tp_group.size() <= 1:
                return
        elif tp_group is None:
            if fmg.parallel_state.get_tensor_model_parallel_world_size() <= 1:
                return
        elif tp_group.size() <= 1:
            return

        params_sum, grads_sum, params_avg, grads_avg = [], [], [], []
        ddp_config = None
        for model_chunk in model:
            ddp_config = model_chunk.ddp_config
            for name, param in fmg.get_attr_wrapped_model(model_chunk, "named_parameters")():
                if not param.requires_grad:
                    continue
                if getattr(param, "average_gradients_across_tp_domain", False):
                    params, grads = params_avg, grads_avg
                elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                    config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
                ):
                    params, grads = params_sum, grads_sum
                else:
                    continue
                grad = getattr(param, grad_attr_of(param, ddp_config))
                if modern:
                    if grad is None:
                        continue
                    params.append(param)
                    if ddp_config.use_megatron_fsdp:
                        grads.append(grad._local_tensor.data)
                    else:
                        grads.append(fmg._unshard_if_dtensor(grad).data)
                else:
                    params.append(param)
                    grads.append(fmg._unshard_if_dtensor(grad).data)

        # As upstream, the write-back uses the ddp_config of the last model chunk.
        def write_back(params, grads):
            def done(i):
                param, buf = params[i], grads[i]
                grad_attr = grad_attr_of(param, ddp_config)
                orig_grad = getattr(param, grad_attr)
                if modern and ddp_config.use_megatron_fsdp:
                    setattr(param, grad_attr, orig_grad)
                else:
                    setattr(param, grad_attr, fmg._reshard_if_dtensor(buf, orig_grad))

            return done

        for params, grads, op in (
            (params_sum, grads_sum, torch.distributed.ReduceOp.SUM),
            (params_avg, grads_avg, torch.distributed.ReduceOp.AVG),
        ):
            if not grads:
                continue
            group = tp_group if (modern or tp_group is not None) else (
                fmg.parallel_state.get_tensor_model_parallel_group()
            )
            allreduce_in_chunks(
                grads, budget_bytes, op=op, group=group, on_tensor_done=write_back(params, grads)
            )

    fn = chunked_allreduce_non_tensor_model_parallel_grads
    fn.finch_budget_bytes = budget_bytes
    fn.finch_original = original
    return fn


@register_patch(
    "chunked_grad_allreduce",
    description="all-reduce non-tensor-parallel grads (finalize_model_grads) in chunks of "
    "at most args.grad_chunk_bytes bytes",
)
def _chunked_grad_allreduce_factory(args) -> List[AttrPatch]:
    budget = resolve_grad_chunk_bytes(args)
    fmg = importlib.import_module(FMG_MODULE)
    original = getattr(fmg, "_allreduce_non_tensor_model_parallel_grads")
    replacement = make_chunked_allreduce(fmg, original, budget)
    edits = [AttrPatch(FMG_MODULE, "_allreduce_non_tensor_model_parallel_grads", replacement)]
    # The legacy alias is repointed only where it is still an alias of the original.
    if getattr(fmg, "_allreduce_layernorm_grads", None) is original:
        edits.append(AttrPatch(FMG_MODULE, "_allreduce_layernorm_grads", replacement, required=False))
    _log().info("finch: chunked non-TP grad all-reduce, budget %d bytes", budget)
    return edits
