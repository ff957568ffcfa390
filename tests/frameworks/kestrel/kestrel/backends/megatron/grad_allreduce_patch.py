"""Chunked replacement for Megatron-Core's TP all-reduce of non-TP-parallel grads.

Megatron-Core's ``finalize_model_grads`` calls the private function
``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
to all-reduce, across the tensor-model-parallel group, the grads of

* parameters marked ``average_gradients_across_tp_domain=True`` (``ReduceOp.AVG``), and
* sequence-parallel parameters (``config.sequence_parallel`` and
  ``param.sequence_parallel``) and, with ``config.qk_layernorm``, parameters whose
  name contains ``q_layernorm`` / ``k_layernorm`` (``ReduceOp.SUM``).

Upstream flattens *all* of those grads of one reduction op into a single
coalesced buffer, which can OOM on large models. The replacement here selects
exactly the same grads, uses the same reduction ops, process group and
write-back, but processes them in consecutive chunks whose flattened size does
not exceed ``GRAD_ALLREDUCE_BUDGET_BYTES``. Chunks are handled synchronously,
one at a time: flatten into a fresh buffer, all-reduce, copy back, drop the
buffer, next chunk.

Nothing is patched at import time. Call :func:`apply_chunked_grad_allreduce_patch`
to install the replacement and :func:`undo_chunked_grad_allreduce_patch` to
restore the original.

Supported megatron-core releases: 0.13.x (``(model, config)`` signature, TP
group from ``parallel_state``, ``ddp_config.use_custom_fsdp``) and 0.15+ up to
0.19.x (``(model, config, tp_group=None)`` signature,
``get_tensor_model_parallel_group_if_none``, ``ddp_config.use_megatron_fsdp``).
The variant is detected from the signature of the original function at apply time.
"""

import functools
import importlib
import inspect
import logging
import threading
from typing import List, Optional, Sequence

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_GRAD_ALLREDUCE_BUDGET_BYTES",
    "GRAD_ALLREDUCE_BUDGET_BYTES",
    "apply_chunked_grad_allreduce_patch",
    "undo_chunked_grad_allreduce_patch",
    "is_chunked_grad_allreduce_patch_applied",
    "split_into_byte_budget_chunks",
    "chunked_allreduce_non_tensor_model_parallel_grads",
]

_TARGET_MODULE = "megatron.core.distributed.finalize_model_grads"
_TARGET_NAME = "_allreduce_non_tensor_model_parallel_grads"
# Legacy alias kept by megatron-core ("_allreduce_layernorm_grads = _allreduce_non_...").
_LEGACY_ALIAS_NAME = "_allreduce_layernorm_grads"

#: Default per-chunk budget, in bytes (256 MiB).
DEFAULT_GRAD_ALLREDUCE_BUDGET_BYTES = 256 * 1024 * 1024

#: Maximum size, in bytes, of one flattened all-reduce buffer. Read at every call
#: of the replacement; set through ``apply_chunked_grad_allreduce_patch(budget_bytes=...)``.
GRAD_ALLREDUCE_BUDGET_BYTES = DEFAULT_GRAD_ALLREDUCE_BUDGET_BYTES

# Patch state, guarded by _LOCK.
_LOCK = threading.Lock()
_PATCH_STATE = None  # dict while applied, else None


# ----------------------------------------------------------------------------
# Chunk splitting
# ----------------------------------------------------------------------------


def split_into_byte_budget_chunks(
    tensors: Sequence[torch.Tensor],
    budget_bytes: int,
    element_size: Optional[int] = None,
) -> List[List[int]]:
    """Split ``tensors`` into consecutive groups whose total size fits ``budget_bytes``.

    Args:
        tensors: tensors in reduction order.
        budget_bytes: maximum number of bytes per group (positive int).
        element_size: bytes per element used for the accounting. ``None`` uses each
            tensor's own ``element_size()``. Pass the element size of the dtype the
            flattened buffer will have when it differs from the tensors' dtype.

    Returns:
        A list of index lists. Order is preserved and every index appears exactly
        once; the groups are contiguous runs. A single tensor larger than the
        budget is placed alone in its own group (it is never split). An empty
        input gives an empty list.
    """
    budget_bytes = _validate_budget(budget_bytes)
    chunks: List[List[int]] = []
    current: List[int] = []
    current_bytes = 0
    for index, tensor in enumerate(tensors):
        size = tensor.numel() * (element_size if element_size is not None else tensor.element_size())
        if current and current_bytes + size > budget_bytes:
            chunks.append(current)
            current = []
            current_bytes = 0
        current.append(index)
        current_bytes += size
    if current:
        chunks.append(current)
    return chunks


def _validate_budget(budget_bytes) -> int:
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
        raise TypeError(f"budget_bytes must be an int number of bytes, got {budget_bytes!r}")
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    return budget_bytes


# ----------------------------------------------------------------------------
# Replacement
# ----------------------------------------------------------------------------


def _get_target_module():
    state = _PATCH_STATE
    if state is not None:
        return state["module"]
    return importlib.import_module(_TARGET_MODULE)


def _is_legacy_variant(fmg_module) -> bool:
    """True for megatron-core 0.13.x, whose function has no ``tp_group`` parameter."""
    state = _PATCH_STATE
    if state is not None:
        return state["legacy"]
    original = getattr(fmg_module, _TARGET_NAME)
    return "tp_group" not in inspect.signature(original).parameters


def _main_grad_attr(fmg_module, legacy: bool, param, use_fsdp: bool) -> str:
    if legacy:
        # 0.13.x: _get_main_grad_attr(param, use_custom_fsdp)
        return fmg_module._get_main_grad_attr(param, use_fsdp)
    return fmg_module._get_main_grad_attr(param)


def chunked_allreduce_non_tensor_model_parallel_grads(
    model: List[torch.nn.Module],
    config,
    tp_group: Optional[torch.distributed.ProcessGroup] = None,
):
    """Drop-in replacement for ``_allreduce_non_tensor_model_parallel_grads``.

    Same grads, reduction ops, process group and write-back as the original of
    the installed megatron-core version; the only difference is that each
    reduction op's grads are flattened and all-reduced in chunks of at most
    ``GRAD_ALLREDUCE_BUDGET_BYTES`` bytes.
    """
    fmg = _get_target_module()
    legacy = _is_legacy_variant(fmg)
    parallel_state = fmg.parallel_state

    if legacy:
        # megatron-core 0.13.x behaviour.
        if tp_group is None:
            if parallel_state.get_tensor_model_parallel_world_size() <= 1:
                return
            tp_group = parallel_state.get_tensor_model_parallel_group()
        elif torch.distributed.get_world_size(group=tp_group) <= 1:
            return
    else:
        tp_group = fmg.get_tensor_model_parallel_group_if_none(tp_group)
        if tp_group.size() <= 1:
            return

    # Selection (identical to upstream): (param, grad_attr, grad_buffer, use_fsdp).
    entries_sum = []
    entries_avg = []
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        if legacy:
            use_fsdp = bool(getattr(ddp_config, "use_custom_fsdp", False))
        else:
            use_fsdp = bool(getattr(ddp_config, "use_megatron_fsdp", False))
        for name, param in fmg.get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                target = entries_avg
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                target = entries_sum
            else:
                continue
            grad_attr = _main_grad_attr(fmg, legacy, param, use_fsdp)
            grad = getattr(param, grad_attr)
            if grad is None:
                continue
            if use_fsdp and not legacy:
                buf = grad._local_tensor.data
            else:
                buf = fmg._unshard_if_dtensor(grad).data
            target.append((param, grad_attr, buf, use_fsdp))

    budget = _validate_budget(GRAD_ALLREDUCE_BUDGET_BYTES)
    for entries, op in (
        (entries_sum, torch.distributed.ReduceOp.SUM),
        (entries_avg, torch.distributed.ReduceOp.AVG),
    ):
        if not entries:
            continue
        _allreduce_in_chunks(fmg, legacy, entries, op, tp_group, budget)


def _allreduce_in_chunks(fmg, legacy, entries, op, group, budget_bytes):
    grads = [entry[2] for entry in entries]
    # Upstream flattens every grad of this op into one buffer, whose dtype is the
    # promotion of all grad dtypes. Keep that reduction dtype for every chunk so
    # results are identical even with mixed grad dtypes.
    reduce_dtype = functools.reduce(torch.promote_types, (g.dtype for g in grads))
    element_size = torch.empty((), dtype=reduce_dtype).element_size()

    for chunk in split_into_byte_budget_chunks(grads, budget_bytes, element_size):
        chunk_grads = [grads[i] for i in chunk]
        flat = _flatten_dense_tensors(chunk_grads)
        if flat.dtype != reduce_dtype:
            flat = flat.to(reduce_dtype)
        torch.distributed.all_reduce(flat, op=op, group=group)
        for i, synced in zip(chunk, _unflatten_dense_tensors(flat, chunk_grads)):
            param, grad_attr, buf, use_fsdp = entries[i]
            buf.copy_(synced)
            orig_grad = getattr(param, grad_attr)
            if use_fsdp and not legacy:
                setattr(param, grad_attr, orig_grad)
            else:
                setattr(param, grad_attr, fmg._reshard_if_dtensor(buf, orig_grad))
        del flat, chunk_grads


# ----------------------------------------------------------------------------
# Apply / undo
# ----------------------------------------------------------------------------


def apply_chunked_grad_allreduce_patch(*, budget_bytes: Optional[int] = None) -> None:
    """Install the chunked all-reduce into Megatron-Core.

    Replaces ``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
    (and the module's legacy alias ``_allreduce_layernorm_grads`` when it still
    points at the original) with
    :func:`chunked_allreduce_non_tensor_model_parallel_grads`.

    Args:
        budget_bytes: if not None, sets the module global ``GRAD_ALLREDUCE_BUDGET_BYTES``
            (bytes per flattened all-reduce chunk). None keeps the current value.

    Idempotent: applying again only updates the budget (when given).
    """
    global GRAD_ALLREDUCE_BUDGET_BYTES, _PATCH_STATE
    if budget_bytes is not None:
        budget_bytes = _validate_budget(budget_bytes)

    with _LOCK:
        if budget_bytes is not None:
            GRAD_ALLREDUCE_BUDGET_BYTES = budget_bytes
        if _PATCH_STATE is not None:
            return

        fmg = importlib.import_module(_TARGET_MODULE)
        original = getattr(fmg, _TARGET_NAME, None)
        if original is None:
            raise RuntimeError(
                f"{_TARGET_MODULE}.{_TARGET_NAME} not found; unsupported megatron-core version"
            )
        legacy = "tp_group" not in inspect.signature(original).parameters
        original_alias = getattr(fmg, _LEGACY_ALIAS_NAME, None)
        patch_alias = original_alias is original

        setattr(fmg, _TARGET_NAME, chunked_allreduce_non_tensor_model_parallel_grads)
        if patch_alias:
            setattr(fmg, _LEGACY_ALIAS_NAME, chunked_allreduce_non_tensor_model_parallel_grads)

        _PATCH_STATE = {
            "module": fmg,
            "original": original,
            "original_alias": original_alias,
            "patched_alias": patch_alias,
            "legacy": legacy,
        }
    logger.info(
        "kestrel: patched %s.%s with chunked all-reduce (budget=%d bytes)",
        _TARGET_MODULE,
        _TARGET_NAME,
        GRAD_ALLREDUCE_BUDGET_BYTES,
    )


def undo_chunked_grad_allreduce_patch() -> bool:
    """Restore Megatron-Core's original function (and legacy alias).

    Returns True if the original was restored, False if the patch was not
    applied. If another party replaced the function after us, that replacement
    is left in place (with a warning) and the patch is considered undone.
    ``GRAD_ALLREDUCE_BUDGET_BYTES`` is left unchanged.
    """
    global _PATCH_STATE
    with _LOCK:
        state = _PATCH_STATE
        if state is None:
            return False
        fmg = state["module"]
        if getattr(fmg, _TARGET_NAME, None) is chunked_allreduce_non_tensor_model_parallel_grads:
            setattr(fmg, _TARGET_NAME, state["original"])
        else:
            logger.warning(
                "kestrel: %s.%s was replaced by someone else after our patch; not restoring it",
                _TARGET_MODULE,
                _TARGET_NAME,
            )
        if (
            state["patched_alias"]
            and getattr(fmg, _LEGACY_ALIAS_NAME, None)
            is chunked_allreduce_non_tensor_model_parallel_grads
        ):
            setattr(fmg, _LEGACY_ALIAS_NAME, state["original_alias"])
        _PATCH_STATE = None
    logger.info("kestrel: restored %s.%s", _TARGET_MODULE, _TARGET_NAME)
    return True


def is_chunked_grad_allreduce_patch_applied() -> bool:
    """Whether :func:`apply_chunked_grad_allreduce_patch` is currently in effect."""
    return _PATCH_STATE is not None
