"""Chunked all-reduce of non-tensor-parallel grads for Megatron-Core.

Megatron-Core's ``_allreduce_non_tensor_model_parallel_grads`` (in
``megatron.core.distributed.finalize_model_grads``) flattens every selected
grad (sequence-parallel / qk-layernorm params: SUM; params flagged
``average_gradients_across_tp_domain``: AVG) into one coalesced buffer and
all-reduces it over the tensor-model-parallel group. On big models that single
buffer can OOM. The replacement here selects the same grads, reduces them over
the same group with the same result, and writes them back the same way, but
stages them through buffers no larger than a byte budget.

Differences from Megatron worth knowing:

* Averaging is done as a SUM all-reduce followed by a division by the group
  size (instead of ``ReduceOp.AVG``).
* A single grad larger than the budget is reduced in contiguous slices of at
  most the budget (if it is contiguous; otherwise it is staged whole).
* A chunk made of one contiguous grad whose dtype already equals the
  reduction dtype is reduced in place, without a staging buffer.
* The reduction dtype of a group is the type promotion of all its grads, which
  is what Megatron's single ``_flatten_dense_tensors`` buffer would have used.
* The FSDP write-back branch is chosen per model chunk's ``ddp_config``
  (Megatron uses the last chunk's; all chunks share one config in practice).

Nothing is patched at import time; call :func:`apply_chunked_grad_allreduce`
and :func:`undo_chunked_grad_allreduce`.
"""

import functools
import importlib
import inspect
import logging
import sys
import threading
from typing import Any, List, Optional, Sequence

import torch
from torch.distributed import ReduceOp, all_reduce, get_world_size

logger = logging.getLogger(__name__)

#: Maximum size, in bytes, of one flattened all-reduce buffer. Read at call
#: time unless :func:`apply_chunked_grad_allreduce` was given ``chunk_bytes``.
PLOVER_CHUNK_BYTES: int = 128 * 1024 * 1024

_TARGET_MODULE = "megatron.core.distributed.finalize_model_grads"
_TARGET_NAME = "_allreduce_non_tensor_model_parallel_grads"
_LEGACY_ALIAS = "_allreduce_layernorm_grads"

_LOCK = threading.Lock()
_ORIGINAL = None  # Megatron's function, saved by apply
_INSTALLED = None  # the replacement currently installed by apply
_ALIAS_PATCHED = False  # whether the legacy alias was pointed at the replacement


def _check_budget(max_bytes: Any) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int):
        raise TypeError(f"chunk byte budget must be an int, got {type(max_bytes).__name__}")
    if max_bytes <= 0:
        raise ValueError(f"chunk byte budget must be positive, got {max_bytes}")
    return max_bytes


def split_into_byte_chunks(
    tensors: Sequence[torch.Tensor],
    max_bytes: int,
    dtype: Optional[torch.dtype] = None,
) -> List[List[torch.Tensor]]:
    """Split ``tensors`` (order kept) into consecutive chunks of at most ``max_bytes``.

    A tensor's size is ``numel * itemsize``, the itemsize being that of ``dtype``
    when given (the dtype the chunk will be flattened into), else the tensor's
    own. Chunks are filled greedily. A tensor larger than ``max_bytes`` is put
    alone in its own chunk (the only case where a chunk exceeds the budget).
    Returns a list of lists of the given tensor objects; empty input gives ``[]``.
    """
    max_bytes = _check_budget(max_bytes)
    chunks: List[List[torch.Tensor]] = []
    current: List[torch.Tensor] = []
    current_bytes = 0
    for tensor in tensors:
        itemsize = dtype.itemsize if dtype is not None else tensor.element_size()
        nbytes = tensor.numel() * itemsize
        if current and current_bytes + nbytes > max_bytes:
            chunks.append(current)
            current, current_bytes = [], 0
        current.append(tensor)
        current_bytes += nbytes
    if current:
        chunks.append(current)
    return chunks


def _unique_tensors(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """Drop repeated views of the same memory so nothing is reduced twice."""
    seen = set()
    unique = []
    for t in tensors:
        key = (str(t.device), t.data_ptr(), t.dtype, tuple(t.shape), tuple(t.stride()))
        if key in seen:
            continue
        seen.add(key)
        unique.append(t)
    return unique


def _reduce_in_chunks(
    tensors: Sequence[torch.Tensor], group, average: bool, max_bytes: int
) -> None:
    """All-reduce ``tensors`` in place over ``group`` through buffers of <= ``max_bytes``."""
    if not tensors:
        return
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
    itemsize = dtype.itemsize
    divisor = get_world_size(group) if average else 1

    def _reduce(buf: torch.Tensor) -> None:
        all_reduce(buf, op=ReduceOp.SUM, group=group)
        if average:
            buf.div_(divisor)

    for chunk in split_into_byte_chunks(tensors, max_bytes, dtype=dtype):
        if len(chunk) == 1:
            t = chunk[0]
            if t.numel() * itemsize > max_bytes and t.is_contiguous():
                flat = t.view(-1)
                step = max(1, max_bytes // itemsize)
                for start in range(0, flat.numel(), step):
                    seg = flat[start : start + step]
                    if seg.dtype == dtype:
                        _reduce(seg)
                    else:
                        staged = seg.to(dtype)
                        _reduce(staged)
                        seg.copy_(staged)
                        del staged
                continue
            if t.dtype == dtype and t.is_contiguous():
                _reduce(t)
                continue

        total = sum(t.numel() for t in chunk)
        if total == 0:
            continue
        buf = torch.empty(total, dtype=dtype, device=chunk[0].device)
        offset = 0
        for t in chunk:
            n = t.numel()
            buf[offset : offset + n].view_as(t).copy_(t)
            offset += n
        _reduce(buf)
        offset = 0
        for t in chunk:
            n = t.numel()
            t.copy_(buf[offset : offset + n].view_as(t))
            offset += n
        del buf


def _finalize_module():
    # ``megatron.core.distributed.finalize_model_grads`` as a package attribute is
    # the function of that name, so resolve the submodule via importlib.
    return importlib.import_module(_TARGET_MODULE)


def _resolve_tp_group(fmg, tp_group):
    """Return the TP group to reduce over, or None when there is nothing to do."""
    if tp_group is None:
        resolve = getattr(fmg, "get_tensor_model_parallel_group_if_none", None)
        if resolve is not None:  # megatron-core >= 0.14
            tp_group = resolve(tp_group)
        else:  # megatron-core 0.13
            if fmg.parallel_state.get_tensor_model_parallel_world_size() <= 1:
                return None
            tp_group = fmg.parallel_state.get_tensor_model_parallel_group()
    if tp_group is None:  # torch.distributed not initialized
        return None
    if get_world_size(tp_group) <= 1:
        return None
    return tp_group


def chunked_allreduce_non_tensor_model_parallel_grads(
    model: List[torch.nn.Module],
    config,
    tp_group=None,
    *,
    chunk_bytes: Optional[int] = None,
) -> None:
    """Drop-in for Megatron's ``_allreduce_non_tensor_model_parallel_grads``, chunked.

    ``chunk_bytes`` defaults to the module global :data:`PLOVER_CHUNK_BYTES`
    (read at call time).
    """
    max_bytes = _check_budget(PLOVER_CHUNK_BYTES if chunk_bytes is None else chunk_bytes)
    fmg = _finalize_module()

    tp_group = _resolve_tp_group(fmg, tp_group)
    if tp_group is None:
        return

    get_grad_attr = fmg._get_main_grad_attr
    takes_fsdp_flag = "use_custom_fsdp" in inspect.signature(get_grad_attr).parameters

    # Entries: (param, grad_attr, grad tensor to reduce, uses megatron FSDP)
    sum_entries = []
    avg_entries = []
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        use_custom_fsdp = bool(getattr(ddp_config, "use_custom_fsdp", False))
        use_megatron_fsdp = bool(getattr(ddp_config, "use_megatron_fsdp", False))
        for name, param in fmg.get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                entries = avg_entries
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                entries = sum_entries
            else:
                continue
            grad_attr = (
                get_grad_attr(param, use_custom_fsdp) if takes_fsdp_flag else get_grad_attr(param)
            )
            grad = getattr(param, grad_attr, None)
            if grad is None:
                continue
            if use_megatron_fsdp:
                data = grad._local_tensor.data
            else:
                data = fmg._unshard_if_dtensor(grad).data
            entries.append((param, grad_attr, data, use_megatron_fsdp))

    for entries, average in ((sum_entries, False), (avg_entries, True)):
        if not entries:
            continue
        _reduce_in_chunks(
            _unique_tensors([e[2] for e in entries]), tp_group, average, max_bytes
        )
        for param, grad_attr, buf, use_megatron_fsdp in entries:
            orig_grad = getattr(param, grad_attr)
            if use_megatron_fsdp:
                setattr(param, grad_attr, orig_grad)
            else:
                setattr(param, grad_attr, fmg._reshard_if_dtensor(buf, orig_grad))


def _make_replacement(chunk_bytes: Optional[int]):
    def _allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
        return chunked_allreduce_non_tensor_model_parallel_grads(
            model, config, tp_group, chunk_bytes=chunk_bytes
        )

    _allreduce_non_tensor_model_parallel_grads.__doc__ = (
        chunked_allreduce_non_tensor_model_parallel_grads.__doc__
    )
    _allreduce_non_tensor_model_parallel_grads.__module__ = __name__
    _allreduce_non_tensor_model_parallel_grads.plover_chunk_bytes = chunk_bytes
    return _allreduce_non_tensor_model_parallel_grads


def apply_chunked_grad_allreduce(*, chunk_bytes: Optional[int] = None):
    """Install the chunked replacement into ``megatron.core.distributed.finalize_model_grads``.

    ``chunk_bytes`` (bytes) fixes the budget for this installation; when None the
    module global :data:`PLOVER_CHUNK_BYTES` is read at each call. Calling it
    again while installed re-installs with the new budget (the saved original is
    kept). The legacy alias ``_allreduce_layernorm_grads`` is redirected too when
    it still points at the original. Returns the installed function.
    """
    global _ORIGINAL, _INSTALLED, _ALIAS_PATCHED
    if chunk_bytes is not None:
        _check_budget(chunk_bytes)
    fmg = _finalize_module()
    with _LOCK:
        current = getattr(fmg, _TARGET_NAME)
        reapply = _INSTALLED is not None and current is _INSTALLED
        original = _ORIGINAL if reapply else current
        replacement = _make_replacement(chunk_bytes)
        setattr(fmg, _TARGET_NAME, replacement)
        alias = getattr(fmg, _LEGACY_ALIAS, None)
        alias_patched = alias is not None and (
            alias is original or (reapply and _ALIAS_PATCHED and alias is _INSTALLED)
        )
        if alias_patched:
            setattr(fmg, _LEGACY_ALIAS, replacement)
        _ORIGINAL, _INSTALLED, _ALIAS_PATCHED = original, replacement, alias_patched
    logger.info(
        "plover: chunked TP grad all-reduce installed (budget: %s bytes)",
        chunk_bytes if chunk_bytes is not None else f"PLOVER_CHUNK_BYTES={PLOVER_CHUNK_BYTES}",
    )
    return replacement


def undo_chunked_grad_allreduce() -> bool:
    """Restore Megatron's original function. Returns False if nothing was installed.

    If someone else replaced the function after us, their replacement is left
    in place (with a warning) and only our bookkeeping is cleared.
    """
    global _ORIGINAL, _INSTALLED, _ALIAS_PATCHED
    with _LOCK:
        if _INSTALLED is None:
            return False
        fmg = sys.modules.get(_TARGET_MODULE)
        if fmg is not None:
            if getattr(fmg, _TARGET_NAME, None) is _INSTALLED:
                setattr(fmg, _TARGET_NAME, _ORIGINAL)
            else:
                logger.warning(
                    "plover: %s.%s was replaced by someone else; not restoring it",
                    _TARGET_MODULE,
                    _TARGET_NAME,
                )
            if _ALIAS_PATCHED and getattr(fmg, _LEGACY_ALIAS, None) is _INSTALLED:
                setattr(fmg, _LEGACY_ALIAS, _ORIGINAL)
        _ORIGINAL, _INSTALLED, _ALIAS_PATCHED = None, None, False
    logger.info("plover: chunked TP grad all-reduce removed")
    return True


def is_chunked_grad_allreduce_applied() -> bool:
    """Whether our replacement is the function Megatron currently calls."""
    fmg = sys.modules.get(_TARGET_MODULE)
    return (
        _INSTALLED is not None
        and fmg is not None
        and getattr(fmg, _TARGET_NAME, None) is _INSTALLED
    )
