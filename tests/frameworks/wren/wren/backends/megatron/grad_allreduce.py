"""Byte-budgeted replacement for Megatron's tensor-parallel grad all-reduce.

Megatron-Core's ``finalize_model_grads`` calls the private function
``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
to all-reduce, over the tensor-model-parallel group, the grads of parameters that are
replicated across TP ranks (sequence-parallel layernorms, q/k layernorms, and params
flagged ``average_gradients_across_tp_domain``). Megatron flattens *all* of those grads
into one coalesced buffer, which on large models can OOM.

:func:`chunked_allreduce_non_tensor_model_parallel_grads` selects the same grads, uses
the same reduce ops (SUM / AVG), the same process group and the same write-back, but
all-reduces them in consecutive chunks whose flattened size is at most
:data:`ALLREDUCE_BUCKET_BYTES` bytes.

Nothing is patched on import. Call :func:`apply_allreduce_patch` to install the
replacement into Megatron and :func:`undo_allreduce_patch` to restore the original.

At import time this module:

* reads the budget from the environment variable ``WREN_ALLREDUCE_BUCKET_BYTES``
  (an integer number of bytes; default 1 GiB) into :data:`ALLREDUCE_BUCKET_BYTES`;
* imports ``megatron.core.distributed.finalize_model_grads`` if it is installed and
  inspects the signatures of its ``_get_main_grad_attr`` and
  ``_allreduce_non_tensor_model_parallel_grads`` to adapt to the Megatron-Core version
  (0.13 passes ``use_custom_fsdp`` to ``_get_main_grad_attr`` and takes no ``tp_group``;
  0.15+ does the opposite).
"""

import functools
import importlib
import inspect
import logging
import os
from typing import List, NamedTuple, Optional, Sequence

import torch

logger = logging.getLogger(__name__)

BUCKET_BYTES_ENV_VAR = "WREN_ALLREDUCE_BUCKET_BYTES"
DEFAULT_ALLREDUCE_BUCKET_BYTES = 1 << 30  # 1 GiB


def _validate_bucket_bytes(value, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{source} must be an int number of bytes, got {value!r}")
    if value <= 0:
        raise ValueError(f"{source} must be a positive number of bytes, got {value}")
    return value


def _read_bucket_bytes_from_env() -> int:
    raw = os.environ.get(BUCKET_BYTES_ENV_VAR)
    if raw is None or not raw.strip():
        return DEFAULT_ALLREDUCE_BUCKET_BYTES
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(
            f"{BUCKET_BYTES_ENV_VAR}={raw!r} is not an integer number of bytes"
        ) from None
    return _validate_bucket_bytes(value, BUCKET_BYTES_ENV_VAR)


#: Maximum flattened size, in bytes, of one all-reduce issued by the chunked reducer.
#: Read from ``WREN_ALLREDUCE_BUCKET_BYTES`` when this module is imported; may be
#: reassigned at runtime (it is looked up on every call) or set via
#: ``apply_allreduce_patch(bucket_bytes=...)``.
ALLREDUCE_BUCKET_BYTES: int = _read_bucket_bytes_from_env()

_FMG_MODULE_NAME = "megatron.core.distributed.finalize_model_grads"
_TARGET_NAME = "_allreduce_non_tensor_model_parallel_grads"
# Legacy alias kept by Megatron ("for legacy tests"); patched too when it still points
# at the original function so both names behave the same.
_LEGACY_ALIAS_NAME = "_allreduce_layernorm_grads"
_WREN_MARKER = "_wren_chunked_allreduce"

# NOTE: ``import megatron.core.distributed.finalize_model_grads as m`` would bind the
# *function* re-exported by ``megatron.core.distributed``; import_module returns the module.
try:
    _fmg = importlib.import_module(_FMG_MODULE_NAME)
except ImportError:
    _fmg = None

if _fmg is not None:
    _megatron_target = getattr(_fmg, _TARGET_NAME)
    # If this module is re-imported while the patch is active, inspect the real original.
    _megatron_target = getattr(_megatron_target, "_wren_replaced", _megatron_target)
    # 0.13: _get_main_grad_attr(param, use_custom_fsdp=False); 0.15+: _get_main_grad_attr(param)
    _GRAD_ATTR_TAKES_CUSTOM_FSDP = (
        "use_custom_fsdp" in inspect.signature(_fmg._get_main_grad_attr).parameters
    )
    # 0.13: (model, config); 0.15+: (model, config, tp_group=None)
    _TARGET_TAKES_TP_GROUP = "tp_group" in inspect.signature(_megatron_target).parameters
    del _megatron_target
else:
    _GRAD_ATTR_TAKES_CUSTOM_FSDP = False
    _TARGET_TAKES_TP_GROUP = True


def _require_megatron():
    if _fmg is None:
        raise RuntimeError(
            f"megatron-core is not importable (could not import {_FMG_MODULE_NAME})"
        )
    return _fmg


def _flat_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype:
    """Dtype of the buffer ``_flatten_dense_tensors(tensors)`` (torch.cat) would produce."""
    return functools.reduce(torch.promote_types, (t.dtype for t in tensors))


def split_tensors_by_bytes(
    tensors: Sequence[torch.Tensor], bucket_bytes: int
) -> List[List[torch.Tensor]]:
    """Split ``tensors`` into consecutive chunks of at most ``bucket_bytes`` bytes each.

    The size of a chunk is the size of its flattened buffer: the sum of ``numel()`` of its
    tensors times the item size of the dtype that flattening *all* of ``tensors`` together
    would produce (torch type promotion, as ``torch.cat`` / ``_flatten_dense_tensors``).
    Order is preserved and the concatenation of the chunks is ``tensors``. Chunks are
    filled greedily. A tensor that alone exceeds ``bucket_bytes`` is put in a chunk of
    its own (that chunk is then the only one over budget).

    Returns a list of lists of the input tensor objects (no copies); ``[]`` for no input.
    """
    bucket_bytes = _validate_bucket_bytes(bucket_bytes, "bucket_bytes")
    tensors = list(tensors)
    if not tensors:
        return []
    itemsize = _flat_dtype(tensors).itemsize
    chunks: List[List[torch.Tensor]] = []
    current: List[torch.Tensor] = []
    current_bytes = 0
    for tensor in tensors:
        nbytes = tensor.numel() * itemsize
        if current and current_bytes + nbytes > bucket_bytes:
            chunks.append(current)
            current, current_bytes = [], 0
        current.append(tensor)
        current_bytes += nbytes
    if current:
        chunks.append(current)
    return chunks


class _GradEntry(NamedTuple):
    param: torch.nn.Parameter
    grad_attr: str
    buf: torch.Tensor  # the tensor that is all-reduced and written into
    use_megatron_fsdp: bool


def _main_grad_attr(fmg, param, ddp_config) -> str:
    if _GRAD_ATTR_TAKES_CUSTOM_FSDP:
        return fmg._get_main_grad_attr(param, getattr(ddp_config, "use_custom_fsdp", False))
    return fmg._get_main_grad_attr(param)


def _resolve_tp_group(fmg, tp_group):
    """Return the TP group to reduce over, or None when there is nothing to do."""
    if tp_group is None and not _TARGET_TAKES_TP_GROUP:
        # Megatron-Core 0.13 behaviour.
        if fmg.parallel_state.get_tensor_model_parallel_world_size() <= 1:
            return None
        return fmg.parallel_state.get_tensor_model_parallel_group()
    if tp_group is None:
        # Megatron-Core 0.15+ behaviour.
        resolve = getattr(fmg, "get_tensor_model_parallel_group_if_none", None)
        if resolve is not None:
            tp_group = resolve(tp_group)
        else:
            tp_group = fmg.parallel_state.get_tensor_model_parallel_group()
    if tp_group.size() <= 1:
        return None
    return tp_group


def _collect_grads(fmg, model, config):
    """Select grads exactly as Megatron does; returns (sum_entries, avg_entries)."""
    sum_entries: List[_GradEntry] = []
    avg_entries: List[_GradEntry] = []
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        use_megatron_fsdp = bool(getattr(ddp_config, "use_megatron_fsdp", False))
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
            grad_attr = _main_grad_attr(fmg, param, ddp_config)
            grad = getattr(param, grad_attr)
            if grad is None:
                continue
            if use_megatron_fsdp:
                buf = grad._local_tensor.data
            else:
                buf = fmg._unshard_if_dtensor(grad).data
            target.append(_GradEntry(param, grad_attr, buf, use_megatron_fsdp))
    return sum_entries, avg_entries


def _write_back(fmg, entry: _GradEntry) -> None:
    orig_grad = getattr(entry.param, entry.grad_attr)
    if entry.use_megatron_fsdp:
        setattr(entry.param, entry.grad_attr, orig_grad)
    else:
        setattr(entry.param, entry.grad_attr, fmg._reshard_if_dtensor(entry.buf, orig_grad))


def _allreduce_oversized(buf, flat_dtype, op, group, bucket_bytes) -> None:
    """All-reduce one tensor larger than the budget in slices of at most bucket_bytes."""
    step = max(1, bucket_bytes // flat_dtype.itemsize)
    work = buf if buf.is_contiguous() else buf.contiguous()
    flat = work.view(-1)
    for start in range(0, flat.numel(), step):
        piece = flat[start : start + step]
        if piece.dtype == flat_dtype:
            torch.distributed.all_reduce(piece, op=op, group=group)
        else:
            staged = piece.to(flat_dtype)
            torch.distributed.all_reduce(staged, op=op, group=group)
            piece.copy_(staged)
            del staged
    if work is not buf:
        buf.copy_(work)


def _allreduce_chunk(chunk, flat_dtype, op, group) -> None:
    """Flatten ``chunk`` into one ``flat_dtype`` buffer, all-reduce it, copy results back."""
    first = chunk[0]
    if len(chunk) == 1 and first.dtype == flat_dtype and first.is_contiguous():
        # Same as _flatten_dense_tensors on a single tensor: reduce in place, no copy.
        torch.distributed.all_reduce(first.view(-1), op=op, group=group)
        return
    total = sum(t.numel() for t in chunk)
    coalesced = torch.empty(total, dtype=flat_dtype, device=first.device)
    offset = 0
    for t in chunk:
        n = t.numel()
        coalesced[offset : offset + n].view_as(t).copy_(t)
        offset += n
    torch.distributed.all_reduce(coalesced, op=op, group=group)
    offset = 0
    for t in chunk:
        n = t.numel()
        t.copy_(coalesced[offset : offset + n].view_as(t))
        offset += n


def _allreduce_entries(fmg, entries: List[_GradEntry], op, group, bucket_bytes: int) -> None:
    bufs = [e.buf for e in entries]
    # Reduce in the dtype Megatron's single coalesced buffer would have had, so values match.
    flat_dtype = _flat_dtype(bufs)
    start = 0
    for chunk in split_tensors_by_bytes(bufs, bucket_bytes):
        chunk_entries = entries[start : start + len(chunk)]
        start += len(chunk)
        if len(chunk) == 1 and chunk[0].numel() * flat_dtype.itemsize > bucket_bytes:
            _allreduce_oversized(chunk[0], flat_dtype, op, group, bucket_bytes)
        else:
            _allreduce_chunk(chunk, flat_dtype, op, group)
        for entry in chunk_entries:
            _write_back(fmg, entry)


def chunked_allreduce_non_tensor_model_parallel_grads(model, config, tp_group=None):
    """Drop-in replacement for Megatron's ``_allreduce_non_tensor_model_parallel_grads``.

    All-reduces, across tensor-model-parallel ranks, the grads of sequence-parallel /
    qk-layernorm params (``ReduceOp.SUM``) and of params with
    ``average_gradients_across_tp_domain=True`` (``ReduceOp.AVG``), in chunks of at most
    :data:`ALLREDUCE_BUCKET_BYTES` bytes (read on every call). Grads that are ``None``
    are skipped (as Megatron-Core 0.15+ does). ``tp_group`` defaults like Megatron:
    the installed version's default tensor-model-parallel group.
    """
    fmg = _require_megatron()
    group = _resolve_tp_group(fmg, tp_group)
    if group is None:
        return
    bucket_bytes = _validate_bucket_bytes(ALLREDUCE_BUCKET_BYTES, "ALLREDUCE_BUCKET_BYTES")
    sum_entries, avg_entries = _collect_grads(fmg, model, config)
    for entries, op in (
        (sum_entries, torch.distributed.ReduceOp.SUM),
        (avg_entries, torch.distributed.ReduceOp.AVG),
    ):
        if entries:
            _allreduce_entries(fmg, entries, op, group, bucket_bytes)


setattr(chunked_allreduce_non_tensor_model_parallel_grads, _WREN_MARKER, True)

# State of an active patch: {attribute name on Megatron's module: original object}.
_saved_originals: Optional[dict] = None


def is_allreduce_patch_applied() -> bool:
    """True if Megatron currently uses the chunked replacement."""
    if _fmg is None:
        return False
    return getattr(getattr(_fmg, _TARGET_NAME), _WREN_MARKER, False)


def apply_allreduce_patch(bucket_bytes: Optional[int] = None) -> None:
    """Install the chunked all-reduce into ``megatron.core.distributed.finalize_model_grads``.

    Replaces the module attribute ``_allreduce_non_tensor_model_parallel_grads`` (looked up
    by ``finalize_model_grads`` at call time) and its legacy alias
    ``_allreduce_layernorm_grads`` if that still points to the original. If
    ``bucket_bytes`` is given it is assigned to :data:`ALLREDUCE_BUCKET_BYTES` (and stays
    so after :func:`undo_allreduce_patch`). Calling it again while applied only updates
    the budget.
    Raises RuntimeError if megatron-core is not importable.
    """
    global ALLREDUCE_BUCKET_BYTES, _saved_originals
    fmg = _require_megatron()
    if bucket_bytes is not None:
        bucket_bytes = _validate_bucket_bytes(bucket_bytes, "bucket_bytes")
    replacement = chunked_allreduce_non_tensor_model_parallel_grads

    current = getattr(fmg, _TARGET_NAME)
    if current is not replacement:
        if getattr(current, _WREN_MARKER, False):
            # Installed by an earlier import of this module; recover the real original.
            current = getattr(current, "_wren_replaced", current)
        originals = {_TARGET_NAME: current}
        if getattr(fmg, _LEGACY_ALIAS_NAME, None) is getattr(fmg, _TARGET_NAME):
            originals[_LEGACY_ALIAS_NAME] = current
        for name in originals:
            setattr(fmg, name, replacement)
        replacement._wren_replaced = current
        _saved_originals = originals

    if bucket_bytes is not None:
        ALLREDUCE_BUCKET_BYTES = bucket_bytes
    logger.info(
        "wren: chunked TP grad all-reduce installed in %s (bucket %d bytes)",
        _FMG_MODULE_NAME,
        ALLREDUCE_BUCKET_BYTES,
    )


def undo_allreduce_patch() -> bool:
    """Restore Megatron's original function(s); the budget global is left as it is.

    Returns True if a patch installed by :func:`apply_allreduce_patch` was undone,
    False if none was active. An attribute that was replaced again by someone else in
    the meantime is left untouched (with a warning).
    """
    global _saved_originals
    if _saved_originals is None or _fmg is None:
        return False
    replacement = chunked_allreduce_non_tensor_model_parallel_grads
    for name, original in _saved_originals.items():
        if getattr(_fmg, name, None) is replacement:
            setattr(_fmg, name, original)
        else:
            logger.warning(
                "wren: %s.%s was replaced by someone else; not restoring it",
                _FMG_MODULE_NAME,
                name,
            )
    _saved_originals = None
    try:
        del replacement._wren_replaced
    except AttributeError:
        pass
    return True


__all__ = [
    "ALLREDUCE_BUCKET_BYTES",
    "BUCKET_BYTES_ENV_VAR",
    "DEFAULT_ALLREDUCE_BUCKET_BYTES",
    "apply_allreduce_patch",
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "is_allreduce_patch_applied",
    "split_tensors_by_bytes",
    "undo_allreduce_patch",
]
