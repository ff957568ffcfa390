"""Chunked replacement for Megatron's non-tensor-parallel grad all-reduce.

``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
all-reduces, across the tensor-model-parallel group, the grads of parameters that
are replicated over TP ranks (sequence-parallel layernorms, qk-layernorms, and
params marked ``average_gradients_across_tp_domain``). Upstream flattens *all* of
them into one coalesced buffer per reduce op, which can OOM on large models.

The replacement here selects exactly the same grads, uses the same reduce ops
(SUM for sequence-parallel / qk-layernorm grads, AVG for
``average_gradients_across_tp_domain``), the same process group and the same
write-back, but all-reduces them in chunks whose flattened size is at most
``budget_bytes``. Chunk all-reduces are issued with ``async_op=True`` and at most
:data:`MAX_CHUNKS_IN_FLIGHT` chunks are outstanding; results are copied back into
the grads after each chunk's wait.

Nothing here runs at import time. Call :func:`apply_chunked_grad_allreduce` to
install the replacement and :func:`undo_chunked_grad_allreduce` to restore the
original.
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import logging
import threading
from typing import Any, Callable, List, Optional, Sequence

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "MAX_CHUNKS_IN_FLIGHT",
    "chunk_tensors_by_bytes",
    "apply_chunked_grad_allreduce",
    "undo_chunked_grad_allreduce",
    "is_chunked_grad_allreduce_applied",
]

#: Default per-chunk byte budget used by :func:`apply_chunked_grad_allreduce` (512 MiB).
DEFAULT_BUDGET_BYTES: int = 512 * 1024 * 1024

#: Maximum number of chunk all-reduces outstanding at once. Peak temporary
#: memory is therefore about ``MAX_CHUNKS_IN_FLIGHT * budget_bytes``.
MAX_CHUNKS_IN_FLIGHT: int = 2

_FMG_MODULE = "megatron.core.distributed.finalize_model_grads"
_TARGET_ATTR = "_allreduce_non_tensor_model_parallel_grads"
# Legacy alias kept by Megatron (0.13 - 0.19); patched alongside when it points
# at the same function, so both names keep behaving identically.
_ALIAS_ATTR = "_allreduce_layernorm_grads"


# --------------------------------------------------------------------------- #
# Chunk splitting helper
# --------------------------------------------------------------------------- #
def chunk_tensors_by_bytes(
    tensors: Sequence[torch.Tensor],
    budget_bytes: int,
    dtype: Optional[torch.dtype] = None,
) -> List[List[int]]:
    """Split ``tensors`` into consecutive chunks of at most ``budget_bytes`` each.

    Greedy and order preserving: tensors are taken in order and a new chunk is
    started whenever adding the next tensor would push the current chunk's
    flattened size over ``budget_bytes``. A single tensor that is larger than
    the budget on its own is placed alone in its own chunk (it is never split).
    Empty input gives ``[]``.

    Args:
        tensors: the tensors to split (only ``numel()`` and the element size are used).
        budget_bytes: maximum flattened size of a chunk, in bytes (> 0).
        dtype: if given, sizes are computed as if every tensor were flattened
            into a buffer of this dtype (the buffer dtype actually used for the
            all-reduce); otherwise each tensor's own element size is used.

    Returns:
        A list of chunks, each a non-empty list of indices into ``tensors``,
        covering every index exactly once, in ascending order.
    """
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be a positive int, got {budget_bytes!r}")
    fixed_itemsize = None if dtype is None else torch.empty((), dtype=dtype).element_size()

    chunks: List[List[int]] = []
    current: List[int] = []
    current_bytes = 0
    for index, tensor in enumerate(tensors):
        itemsize = fixed_itemsize if fixed_itemsize is not None else tensor.element_size()
        nbytes = tensor.numel() * itemsize
        if current and current_bytes + nbytes > budget_bytes:
            chunks.append(current)
            current, current_bytes = [], 0
        current.append(index)
        current_bytes += nbytes
    if current:
        chunks.append(current)
    return chunks


# --------------------------------------------------------------------------- #
# Version handling
# --------------------------------------------------------------------------- #
class _MegatronFlavor:
    """What differs between the supported megatron-core releases.

    * 0.13.x: ``_get_main_grad_attr(param, use_custom_fsdp)``, TP group taken
      from ``parallel_state``, no ``use_megatron_fsdp`` handling, function takes
      ``(model, config)``.
    * 0.15.x / 0.16.x / 0.19.x: ``_get_main_grad_attr(param)``, TP group passed
      in as ``tp_group`` and resolved with
      ``get_tensor_model_parallel_group_if_none``, ``use_megatron_fsdp`` grads
      are reduced through ``grad._local_tensor``, ``None`` grads are skipped.

    Helpers (``_get_main_grad_attr``, ``_unshard_if_dtensor``,
    ``_reshard_if_dtensor``, ``get_attr_wrapped_model``, ``parallel_state``) are
    always looked up on Megatron's own module at call time.
    """

    def __init__(self, fmg: Any) -> None:
        self.fmg = fmg
        try:
            n_params = len(inspect.signature(fmg._get_main_grad_attr).parameters)
        except (TypeError, ValueError):  # pragma: no cover - builtins / odd callables
            n_params = 1
        # 0.13.x takes (param, use_custom_fsdp).
        self.grad_attr_takes_fsdp_flag = n_params >= 2
        self.has_tp_group_resolver = hasattr(fmg, "get_tensor_model_parallel_group_if_none")

    def resolve_tp_group(self, tp_group: Optional[Any]) -> Optional[Any]:
        """Return the TP group to reduce over, or None when there is nothing to do."""
        fmg = self.fmg
        if self.has_tp_group_resolver:
            tp_group = fmg.get_tensor_model_parallel_group_if_none(tp_group)
            if tp_group is None or tp_group.size() <= 1:
                return None
            return tp_group
        # 0.13.x
        if tp_group is None:
            if fmg.parallel_state.get_tensor_model_parallel_world_size() <= 1:
                return None
            return fmg.parallel_state.get_tensor_model_parallel_group()
        if tp_group.size() <= 1:
            return None
        return tp_group

    def grad_attr(self, param: torch.nn.Parameter, ddp_config: Any) -> str:
        if self.grad_attr_takes_fsdp_flag:
            return self.fmg._get_main_grad_attr(param, getattr(ddp_config, "use_custom_fsdp", False))
        return self.fmg._get_main_grad_attr(param)

    def uses_local_tensor(self, ddp_config: Any) -> bool:
        """Whether grads are reduced through ``grad._local_tensor`` (Megatron-FSDP)."""
        if self.grad_attr_takes_fsdp_flag:
            return False  # 0.13.x has no such path
        return bool(getattr(ddp_config, "use_megatron_fsdp", False))


class _GradEntry:
    __slots__ = ("param", "buf", "ddp_config", "local_tensor")

    def __init__(self, param, buf, ddp_config, local_tensor):
        self.param = param
        self.buf = buf
        self.ddp_config = ddp_config
        self.local_tensor = local_tensor


def _collect_grads(flavor: _MegatronFlavor, model, config):
    """Select grads exactly as Megatron does. Returns (sum_entries, avg_entries)."""
    fmg = flavor.fmg
    sum_entries: List[_GradEntry] = []
    avg_entries: List[_GradEntry] = []
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        local_tensor = flavor.uses_local_tensor(ddp_config)
        for name, param in fmg.get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                target = avg_entries
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                target = sum_entries
            else:
                continue
            grad = getattr(param, flavor.grad_attr(param, ddp_config), None)
            if grad is None:
                continue
            if local_tensor:
                buf = grad._local_tensor.data
            else:
                buf = fmg._unshard_if_dtensor(grad).data
            target.append(_GradEntry(param, buf, ddp_config, local_tensor))
    return sum_entries, avg_entries


def _write_back(flavor: _MegatronFlavor, entry: _GradEntry) -> None:
    """Put the (already updated) buffer back where Megatron keeps the grad."""
    param = entry.param
    grad_attr = flavor.grad_attr(param, entry.ddp_config)
    orig_grad = getattr(param, grad_attr)
    if entry.local_tensor:
        setattr(param, grad_attr, orig_grad)
    else:
        setattr(param, grad_attr, flavor.fmg._reshard_if_dtensor(entry.buf, orig_grad))


class _InFlight:
    __slots__ = ("handle", "entries", "flat", "offsets")

    def __init__(self, handle, entries, flat, offsets):
        self.handle = handle
        self.entries = entries
        self.flat = flat  # None when the single grad was reduced in place
        self.offsets = offsets


def _finish(flavor: _MegatronFlavor, job: _InFlight) -> None:
    if job.handle is not None:
        job.handle.wait()
    if job.flat is not None:
        for entry, (start, end) in zip(job.entries, job.offsets):
            entry.buf.copy_(job.flat[start:end].view_as(entry.buf))
    for entry in job.entries:
        _write_back(flavor, entry)


def _launch(entries: List[_GradEntry], flat_dtype, op, group) -> _InFlight:
    if len(entries) == 1:
        buf = entries[0].buf
        if buf.dtype == flat_dtype and buf.is_contiguous():
            # Reducing in place is identical to flatten/reduce/copy for one tensor
            # and needs no temporary buffer (matters for grads above the budget).
            handle = torch.distributed.all_reduce(buf, op=op, group=group, async_op=True)
            return _InFlight(handle, entries, None, None)
    total = sum(entry.buf.numel() for entry in entries)
    flat = torch.empty(total, dtype=flat_dtype, device=entries[0].buf.device)
    offsets = []
    start = 0
    for entry in entries:
        end = start + entry.buf.numel()
        flat[start:end].copy_(entry.buf.reshape(-1))
        offsets.append((start, end))
        start = end
    handle = torch.distributed.all_reduce(flat, op=op, group=group, async_op=True)
    return _InFlight(handle, entries, flat, offsets)


def _common_dtype(entries: Sequence[_GradEntry]) -> torch.dtype:
    # Upstream flattens a whole group with torch.cat, which type-promotes; keep
    # that buffer dtype per group so every chunk reduces in the same precision.
    return functools.reduce(torch.promote_types, (entry.buf.dtype for entry in entries))


def _chunked_allreduce(flavor: _MegatronFlavor, budget_bytes: int, model, config, tp_group=None):
    group = flavor.resolve_tp_group(tp_group)
    if group is None:
        return

    sum_entries, avg_entries = _collect_grads(flavor, model, config)

    in_flight: "collections.deque[_InFlight]" = collections.deque()
    try:
        for entries, op in (
            (sum_entries, torch.distributed.ReduceOp.SUM),
            (avg_entries, torch.distributed.ReduceOp.AVG),
        ):
            if not entries:
                continue
            flat_dtype = _common_dtype(entries)
            for indices in chunk_tensors_by_bytes([e.buf for e in entries], budget_bytes, flat_dtype):
                if len(in_flight) >= MAX_CHUNKS_IN_FLIGHT:
                    _finish(flavor, in_flight.popleft())
                in_flight.append(_launch([entries[i] for i in indices], flat_dtype, op, group))
        while in_flight:
            _finish(flavor, in_flight.popleft())
    finally:
        # On error, still wait on anything already launched before the buffers go away.
        for job in in_flight:
            try:
                job.handle.wait()
            except Exception:  # pragma: no cover - best effort during error unwinding
                logger.exception("osprey: waiting on an in-flight grad all-reduce failed")


# --------------------------------------------------------------------------- #
# Apply / undo
# --------------------------------------------------------------------------- #
_lock = threading.Lock()
_original: Optional[Callable] = None  # Megatron's function, while patched
_installed: Optional[Callable] = None  # our replacement, while patched
_alias_patched: bool = False


def _load_fmg():
    # Note: ``megatron.core.distributed.finalize_model_grads`` as an attribute
    # is the *function* re-exported by the package, so import the module by name.
    return importlib.import_module(_FMG_MODULE)


def _make_replacement(fmg, budget_bytes: int, original: Callable) -> Callable:
    flavor = _MegatronFlavor(fmg)

    def _allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
        """osprey: chunked version of Megatron's function (see osprey.backends.megatron)."""
        _chunked_allreduce(flavor, budget_bytes, model, config, tp_group)

    _allreduce_non_tensor_model_parallel_grads.__module__ = __name__
    _allreduce_non_tensor_model_parallel_grads.__qualname__ = "chunked_allreduce_non_tensor_model_parallel_grads"
    _allreduce_non_tensor_model_parallel_grads.osprey_budget_bytes = budget_bytes
    _allreduce_non_tensor_model_parallel_grads.osprey_original = original
    return _allreduce_non_tensor_model_parallel_grads


def apply_chunked_grad_allreduce(budget_bytes: int = DEFAULT_BUDGET_BYTES) -> Callable:
    """Replace Megatron's ``_allreduce_non_tensor_model_parallel_grads`` with the chunked version.

    Args:
        budget_bytes: maximum flattened size of one all-reduce chunk, in bytes.
            Defaults to :data:`DEFAULT_BUDGET_BYTES` (512 MiB).

    Calling it again while applied re-installs the replacement with the new
    budget (the saved original is kept). Raises ``RuntimeError`` if someone else
    replaced the function after osprey did. Returns the installed function.
    """
    global _original, _installed, _alias_patched
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be a positive int (bytes), got {budget_bytes!r}")
    fmg = _load_fmg()
    with _lock:
        current = getattr(fmg, _TARGET_ATTR)
        if _installed is None:
            original = current
        elif current is _installed:
            original = _original
        else:
            raise RuntimeError(
                f"{_FMG_MODULE}.{_TARGET_ATTR} was replaced by someone else after osprey patched it; "
                "refusing to patch over it"
            )
        replacement = _make_replacement(fmg, budget_bytes, original)
        alias = getattr(fmg, _ALIAS_ATTR, None)
        alias_patched = alias is not None and (alias is original or alias is _installed)
        setattr(fmg, _TARGET_ATTR, replacement)
        if alias_patched:
            setattr(fmg, _ALIAS_ATTR, replacement)
        _original, _installed, _alias_patched = original, replacement, alias_patched
    logger.info("osprey: chunked TP grad all-reduce installed (budget %d bytes)", budget_bytes)
    return replacement


def undo_chunked_grad_allreduce() -> bool:
    """Restore Megatron's original function.

    Returns True if the patch was removed, False if it was not applied. Raises
    ``RuntimeError`` if someone else replaced the function after osprey did.
    """
    global _original, _installed, _alias_patched
    with _lock:
        if _installed is None:
            return False
        fmg = _load_fmg()
        if getattr(fmg, _TARGET_ATTR) is not _installed:
            raise RuntimeError(
                f"{_FMG_MODULE}.{_TARGET_ATTR} was replaced by someone else after osprey patched it; "
                "refusing to undo over it"
            )
        setattr(fmg, _TARGET_ATTR, _original)
        if _alias_patched and getattr(fmg, _ALIAS_ATTR, None) is _installed:
            setattr(fmg, _ALIAS_ATTR, _original)
        _original, _installed, _alias_patched = None, None, False
    logger.info("osprey: chunked TP grad all-reduce removed")
    return True


def is_chunked_grad_allreduce_applied() -> bool:
    """Whether :func:`apply_chunked_grad_allreduce` is currently in effect."""
    return _installed is not None
