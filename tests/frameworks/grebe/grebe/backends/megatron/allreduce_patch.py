"""Chunked all-reduce of non-tensor-parallel grads for Megatron-Core.

IMPORTING THIS MODULE APPLIES THE PATCH. The module body replaces
``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
(and its legacy alias ``_allreduce_layernorm_grads`` where that alias still
points at the original) with :func:`chunked_allreduce_non_tensor_model_parallel_grads`.
There is no undo function. The grebe package ``__init__`` files never import
this module; the training entry point does.

Megatron's version flattens every selected grad into one coalesced buffer and
all-reduces it over the tensor-model-parallel group. On large models that
buffer can be big enough to OOM. The replacement selects the same grads, uses
the same reduce ops (SUM for sequence-parallel / qk-layernorm params, AVG for
params with ``average_gradients_across_tp_domain``), the same process group and
the same write-back, but all-reduces them in consecutive chunks whose flattened
size is at most :data:`ALLREDUCE_CHUNK_BYTES`. A chunk holding a single
contiguous grad (e.g. one larger than the budget) is all-reduced in place,
with no extra buffer.

Supported: megatron-core 0.13.x (``(model, config)``, ``use_custom_fsdp``)
and 0.14+ up to at least 0.19 (``(model, config, tp_group=None)``,
``use_megatron_fsdp``).
"""

import functools
import importlib
import inspect
from typing import List, Optional

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .grad_chunking import split_tensors_by_bytes

__all__ = [
    "ALLREDUCE_CHUNK_BYTES",
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "allreduce_in_chunks",
    "ORIGINAL_ALLREDUCE_NON_TENSOR_MODEL_PARALLEL_GRADS",
]

#: Byte budget of one all-reduce chunk (flattened size), default 256 MiB.
#: Read on every call, so it can be changed after import:
#: ``allreduce_patch.ALLREDUCE_CHUNK_BYTES = 64 * 1024 * 1024``.
ALLREDUCE_CHUNK_BYTES = 256 * 1024 * 1024

_TARGET_MODULE = "megatron.core.distributed.finalize_model_grads"
_TARGET_NAME = "_allreduce_non_tensor_model_parallel_grads"
_LEGACY_ALIAS = "_allreduce_layernorm_grads"

# ``megatron.core.distributed`` re-exports the *function* ``finalize_model_grads``
# under the same name as the submodule, so ``import ... as`` would give the
# function; importlib returns the module from sys.modules.
_fmg = importlib.import_module(_TARGET_MODULE)

if not hasattr(_fmg, _TARGET_NAME):
    raise ImportError(
        f"grebe: {_TARGET_MODULE}.{_TARGET_NAME} not found; this megatron-core "
        "version is not supported by grebe.backends.megatron.allreduce_patch"
    )

_current = getattr(_fmg, _TARGET_NAME)
#: Megatron's own implementation, as found before grebe replaced it.
ORIGINAL_ALLREDUCE_NON_TENSOR_MODEL_PARALLEL_GRADS = getattr(
    _current, "__grebe_original__", _current
)
del _current

# megatron-core <= 0.13: (model, config); tp group from parallel_state.
# megatron-core >= 0.14: (model, config, tp_group=None).
_TAKES_TP_GROUP = "tp_group" in inspect.signature(
    ORIGINAL_ALLREDUCE_NON_TENSOR_MODEL_PARALLEL_GRADS
).parameters
# megatron-core <= 0.13: _get_main_grad_attr(param, use_custom_fsdp).
_GRAD_ATTR_TAKES_FSDP_FLAG = len(inspect.signature(_fmg._get_main_grad_attr).parameters) > 1


def _grad_attr(param, ddp_config) -> str:
    if _GRAD_ATTR_TAKES_FSDP_FLAG:
        return _fmg._get_main_grad_attr(param, getattr(ddp_config, "use_custom_fsdp", False))
    return _fmg._get_main_grad_attr(param)


def _resolve_tp_group(tp_group):
    """Return the TP group, or None when there is nothing to reduce."""
    if _TAKES_TP_GROUP:
        tp_group = _fmg.get_tensor_model_parallel_group_if_none(tp_group)
        if tp_group.size() <= 1:
            return None
        return tp_group
    # megatron-core 0.13.x
    if tp_group is None:
        if _fmg.parallel_state.get_tensor_model_parallel_world_size() <= 1:
            return None
        return _fmg.parallel_state.get_tensor_model_parallel_group()
    if tp_group.size() <= 1:
        return None
    return tp_group


def allreduce_in_chunks(
    tensors: List[torch.Tensor],
    op,
    group,
    budget_bytes: Optional[int] = None,
) -> None:
    """All-reduce ``tensors`` in place over ``group``, chunk by chunk.

    Each chunk (from :func:`split_tensors_by_bytes`) is flattened into a buffer
    of at most ``budget_bytes`` (default :data:`ALLREDUCE_CHUNK_BYTES`),
    all-reduced with ``op`` and copied back. The buffer dtype is the dtype
    promotion of all ``tensors`` (what one coalesced buffer would have had), so
    values match a single coalesced all-reduce. A chunk of one contiguous
    tensor already in that dtype is all-reduced in place without a buffer.
    """
    if not tensors:
        return
    if budget_bytes is None:
        budget_bytes = ALLREDUCE_CHUNK_BYTES
    # The same view listed twice (e.g. a param shared by two model chunks)
    # must be reduced once: with chunking, a second copy could otherwise land
    # in a later chunk and be reduced again after the first write-back.
    unique = {}
    for t in tensors:
        key = (t.device, t.dtype, t.data_ptr(), tuple(t.shape), tuple(t.stride()))
        unique.setdefault(key, t)
    tensors = list(unique.values())
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))
    for chunk in split_tensors_by_bytes(tensors, budget_bytes, dtype):
        if len(chunk) == 1 and chunk[0].dtype == dtype and chunk[0].is_contiguous():
            torch.distributed.all_reduce(chunk[0], op=op, group=group)
            continue
        if all(t.dtype == dtype for t in chunk):
            coalesced = _flatten_dense_tensors(chunk)
        else:
            coalesced = torch.cat([t.reshape(-1).to(dtype) for t in chunk])
        torch.distributed.all_reduce(coalesced, op=op, group=group)
        for buf, synced in zip(chunk, _unflatten_dense_tensors(coalesced, chunk)):
            buf.copy_(synced)
        del coalesced


def chunked_allreduce_non_tensor_model_parallel_grads(
    model: List[torch.nn.Module],
    config,
    tp_group: Optional[torch.distributed.ProcessGroup] = None,
):
    """Drop-in replacement for Megatron's ``_allreduce_non_tensor_model_parallel_grads``.

    All-reduce both layernorm grads (for sequence parallelism / qk layernorm)
    and grads of params with ``average_gradients_across_tp_domain=True``
    across tensor-model-parallel ranks, in chunks of at most
    :data:`ALLREDUCE_CHUNK_BYTES` bytes.
    """
    tp_group = _resolve_tp_group(tp_group)
    if tp_group is None:
        return

    # (param, grad tensor to reduce, use_megatron_fsdp) per reduce op.
    entries_sum = []
    entries_avg = []

    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        megatron_fsdp = (not _GRAD_ATTR_TAKES_FSDP_FLAG) and bool(
            getattr(ddp_config, "use_megatron_fsdp", False)
        )
        for name, param in _fmg.get_attr_wrapped_model(model_chunk, 'named_parameters')():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                entries = entries_avg
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                entries = entries_sum
            else:
                continue
            grad = getattr(param, _grad_attr(param, ddp_config))
            if grad is None:
                continue
            if megatron_fsdp:
                entries.append((param, grad._local_tensor.data, ddp_config, True))
            else:
                grad = _fmg._unshard_if_dtensor(grad)
                entries.append((param, grad.data, ddp_config, False))

    for entries, op in (
        (entries_sum, torch.distributed.ReduceOp.SUM),
        (entries_avg, torch.distributed.ReduceOp.AVG),
    ):
        if not entries:
            continue
        allreduce_in_chunks([e[1] for e in entries], op, tp_group)
        for param, buf, ddp_config, megatron_fsdp in entries:
            grad_attr = _grad_attr(param, ddp_config)
            orig_grad = getattr(param, grad_attr)
            if megatron_fsdp:
                setattr(param, grad_attr, orig_grad)
            else:
                setattr(param, grad_attr, _fmg._reshard_if_dtensor(buf, orig_grad))


chunked_allreduce_non_tensor_model_parallel_grads.__grebe_original__ = (
    ORIGINAL_ALLREDUCE_NON_TENSOR_MODEL_PARALLEL_GRADS
)

# ---------------------------------------------------------------------------
# Apply the patch (module import side effect, by design; no undo).
# ``finalize_model_grads`` looks the function up in its module globals at call
# time, so rebinding the module attribute is enough.
# ---------------------------------------------------------------------------
if getattr(_fmg, _LEGACY_ALIAS, None) in (
    ORIGINAL_ALLREDUCE_NON_TENSOR_MODEL_PARALLEL_GRADS,
    getattr(_fmg, _TARGET_NAME),
):
    setattr(_fmg, _LEGACY_ALIAS, chunked_allreduce_non_tensor_model_parallel_grads)
setattr(_fmg, _TARGET_NAME, chunked_allreduce_non_tensor_model_parallel_grads)
