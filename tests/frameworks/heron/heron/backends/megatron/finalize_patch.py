"""Chunked replacement of Megatron-Core's
``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``.

Megatron's version flattens *all* selected grads of a kind (the sequence-parallel
/ qk-layernorm grads that are SUM-reduced, and the
``average_gradients_across_tp_domain`` grads that are AVG-reduced) into one
coalesced buffer and all-reduces it over the tensor-model-parallel group. On big
models that extra buffer can OOM. The replacement selects the same grads, uses
the same reduce op and group and writes back the same way, but all-reduces them
in chunks whose flattened size stays within a byte budget:

* if a chunk's grads are contiguous views lying side by side in one storage
  (Megatron keeps ``main_grad`` as views of its contiguous grad buffer), one
  view of that region is all-reduced in place (no copy);
* otherwise the chunk is flattened, all-reduced and copied back, like Megatron
  does for the whole list.

Nothing here runs at import time. Megatron is imported only by
:func:`apply_chunked_grad_allreduce` and by the replacement when it runs.
"""

import importlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .grad_chunking import contiguous_region_view, split_into_byte_chunks

__all__ = [
    "DEFAULT_BUDGET_BYTES",
    "ChunkedAllReduceConfig",
    "apply_chunked_grad_allreduce",
    "undo_chunked_grad_allreduce",
    "is_chunked_grad_allreduce_applied",
    "chunked_allreduce_non_tensor_model_parallel_grads",
]

logger = logging.getLogger(__name__)

FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
TARGET_NAME = "_allreduce_non_tensor_model_parallel_grads"
# Legacy alias Megatron keeps pointing at the same function object.
ALIAS_NAME = "_allreduce_layernorm_grads"

#: Default byte budget of one all-reduce chunk (256 MiB).
DEFAULT_BUDGET_BYTES = 256 * 1024 * 1024


@dataclass
class ChunkedAllReduceConfig:
    """Settings of the installed patch.

    Attributes:
        budget_bytes: maximum flattened size, in bytes, of one all-reduce chunk.
            A single grad larger than this is reduced on its own.
    """

    budget_bytes: int = DEFAULT_BUDGET_BYTES


#: The live configuration read by the replacement at each call.
CONFIG = ChunkedAllReduceConfig()

# Originals saved by apply_chunked_grad_allreduce: attribute name -> object.
_saved_originals: Dict[str, Any] = {}


def _finalize_module():
    # ``import megatron.core.distributed.finalize_model_grads as m`` would give
    # the *function* of that name (megatron.core.distributed re-exports it and
    # shadows the submodule attribute), so go through importlib.
    return importlib.import_module(FINALIZE_MODULE)


def _validate_budget(budget_bytes) -> int:
    if isinstance(budget_bytes, bool):
        raise TypeError("budget_bytes must be an integer number of bytes")
    budget = int(budget_bytes)
    if budget != budget_bytes or budget <= 0:
        raise ValueError(f"budget_bytes must be a positive integer number of bytes, got {budget_bytes!r}")
    return budget


def apply_chunked_grad_allreduce(budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
    """Install the chunked all-reduce into Megatron-Core.

    Replaces ``finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
    (and its legacy alias ``_allreduce_layernorm_grads`` when it still points at
    the same function) with
    :func:`chunked_allreduce_non_tensor_model_parallel_grads`, and stores
    ``budget_bytes`` on :data:`CONFIG`. ``finalize_model_grads`` looks the name
    up in its module globals at call time, so the replacement takes effect for
    every later call. Calling it again while applied only updates the budget.

    Args:
        budget_bytes: maximum flattened size of one all-reduce chunk, in bytes.
    """
    budget = _validate_budget(budget_bytes)
    module = _finalize_module()
    CONFIG.budget_bytes = budget
    if _saved_originals:
        logger.debug("chunked grad all-reduce already applied; budget set to %d bytes", budget)
        return
    original = getattr(module, TARGET_NAME)
    _saved_originals[TARGET_NAME] = original
    if getattr(module, ALIAS_NAME, None) is original:
        _saved_originals[ALIAS_NAME] = original
    for name in _saved_originals:
        setattr(module, name, chunked_allreduce_non_tensor_model_parallel_grads)
    logger.info(
        "Patched %s.%s with chunked all-reduce (budget %d bytes)", FINALIZE_MODULE, TARGET_NAME, budget
    )


def undo_chunked_grad_allreduce() -> bool:
    """Restore Megatron's original function(s). Returns False if not applied.

    An attribute that someone else replaced after us is left as it is (with a
    warning), so an outer patch is not clobbered.
    """
    if not _saved_originals:
        return False
    module = _finalize_module()
    for name, original in _saved_originals.items():
        current = getattr(module, name, None)
        if current is chunked_allreduce_non_tensor_model_parallel_grads:
            setattr(module, name, original)
        else:
            logger.warning(
                "%s.%s was replaced by someone else after heron patched it; leaving it as is",
                FINALIZE_MODULE,
                name,
            )
    _saved_originals.clear()
    CONFIG.budget_bytes = DEFAULT_BUDGET_BYTES
    return True


def is_chunked_grad_allreduce_applied() -> bool:
    """Whether :func:`apply_chunked_grad_allreduce` is in effect."""
    return bool(_saved_originals)


def _grad_attr_getter(fmg) -> Callable[[torch.nn.Parameter, Any], str]:
    """Megatron's ``_get_main_grad_attr`` took ``use_custom_fsdp`` up to 0.13."""
    get_attr = fmg._get_main_grad_attr
    takes_custom_fsdp = len(inspect.signature(get_attr).parameters) > 1

    def grad_attr(param, ddp_config):
        if takes_custom_fsdp:
            return get_attr(param, getattr(ddp_config, "use_custom_fsdp", False))
        return get_attr(param)

    return grad_attr


def _resolve_tp_group(fmg, tp_group):
    """The group Megatron's version of the function would use (None: nothing to do)."""
    if tp_group is not None:
        return tp_group if tp_group.size() > 1 else None
    resolver = getattr(fmg, "get_tensor_model_parallel_group_if_none", None)
    if resolver is not None:  # megatron-core >= 0.14
        tp_group = resolver(tp_group)
        if tp_group is None:  # torch.distributed (or parallel_state) not initialized
            return None
        return tp_group if tp_group.size() > 1 else None
    # megatron-core 0.13: no tp_group argument, uses parallel_state's group.
    parallel_state = fmg.parallel_state
    if parallel_state.get_tensor_model_parallel_world_size() <= 1:
        return None
    return parallel_state.get_tensor_model_parallel_group()


class _Entry:
    __slots__ = ("param", "grad_attr", "buf", "megatron_fsdp")

    def __init__(self, param, grad_attr, buf, megatron_fsdp):
        self.param = param
        self.grad_attr = grad_attr
        self.buf = buf
        self.megatron_fsdp = megatron_fsdp


def _allreduce_entries(fmg, entries: List[_Entry], op, group, budget_bytes: int) -> None:
    grads = [e.buf for e in entries]
    start = 0
    for chunk in split_into_byte_chunks(grads, budget_bytes):
        chunk_entries = entries[start : start + len(chunk)]
        start += len(chunk)
        region = contiguous_region_view(chunk)
        if region is not None:
            # Grads tile one storage region: reduce it in place, no copy.
            torch.distributed.all_reduce(region, op=op, group=group)
        else:
            coalesced = _flatten_dense_tensors(chunk)
            torch.distributed.all_reduce(coalesced, op=op, group=group)
            for buf, synced in zip(chunk, _unflatten_dense_tensors(coalesced, chunk)):
                buf.copy_(synced)
            del coalesced
        for e in chunk_entries:
            orig_grad = getattr(e.param, e.grad_attr)
            if e.megatron_fsdp:
                setattr(e.param, e.grad_attr, orig_grad)
            else:
                setattr(e.param, e.grad_attr, fmg._reshard_if_dtensor(e.buf, orig_grad))


def chunked_allreduce_non_tensor_model_parallel_grads(
    model: List[torch.nn.Module], config, tp_group: Optional[Any] = None
) -> None:
    """Drop-in replacement for Megatron's ``_allreduce_non_tensor_model_parallel_grads``.

    All-reduces, across tensor-model-parallel ranks, the grads of

    * params with ``average_gradients_across_tp_domain=True`` (``ReduceOp.AVG``);
    * otherwise, params with ``sequence_parallel=True`` when
      ``config.sequence_parallel``, or whose name contains ``q_layernorm`` /
      ``k_layernorm`` when ``config.qk_layernorm`` (``ReduceOp.SUM``);

    only for params with ``requires_grad`` and a grad that is not None, in
    chunks of at most ``CONFIG.budget_bytes`` flattened bytes. Results are
    written back where Megatron keeps the grad (``main_grad`` / ``grad`` /
    ``fsdp_managed_main_grad``, the local shard for Megatron-FSDP, re-sharded
    for DTensor grads). Accepts both the 0.13 signature ``(model, config)`` and
    the later ``(model, config, tp_group=None)``.
    """
    fmg = _finalize_module()
    group = _resolve_tp_group(fmg, tp_group)
    if group is None:
        return

    grad_attr_of = _grad_attr_getter(fmg)
    get_attr_wrapped_model = fmg.get_attr_wrapped_model
    sequence_parallel = getattr(config, "sequence_parallel", False)
    qk_layernorm = getattr(config, "qk_layernorm", False)

    entries_sum: List[_Entry] = []
    entries_avg: List[_Entry] = []
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        megatron_fsdp = bool(getattr(ddp_config, "use_megatron_fsdp", False))
        for name, param in get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                target = entries_avg
            elif (sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                target = entries_sum
            else:
                continue
            grad_attr = grad_attr_of(param, ddp_config)
            grad = getattr(param, grad_attr)
            if grad is None:
                continue
            if megatron_fsdp:
                buf = grad._local_tensor.data
            else:
                buf = fmg._unshard_if_dtensor(grad).data
            target.append(_Entry(param, grad_attr, buf, megatron_fsdp))

    budget = CONFIG.budget_bytes
    for entries, op in (
        (entries_sum, torch.distributed.ReduceOp.SUM),
        (entries_avg, torch.distributed.ReduceOp.AVG),
    ):
        if entries:
            _allreduce_entries(fmg, entries, op, group, budget)
