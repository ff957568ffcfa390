"""Chunked replacement of Megatron's TP all-reduce of non-tensor-parallel grads.

Upstream, ``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
(alias ``_allreduce_layernorm_grads``) flattens every selected grad into ONE coalesced buffer per
reduce op. tern's replacement selects exactly the same grads, with the same op, on the same grad
attribute, in the same dtype (the promoted dtype of the whole group, as ``torch.cat`` would give),
but all-reduces them through buffers of at most ``bucket_mb`` MiB each.

The patch is applied only by the ``chunked_grad_allreduce(bucket_mb)`` context manager and is
undone on exit, even when the body raises. Importing this module patches nothing and imports
neither torch nor Megatron.
"""

import importlib
import inspect
from typing import Any, Dict, List, Optional

from .chunking import coalesced_dtype, mib_to_bytes, split_into_chunks

FINALIZE_MODULE = "megatron.core.distributed.finalize_model_grads"
PATCHED_NAMES = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")
REPLACEMENT_NAME = "tern_chunked_allreduce_non_tensor_model_parallel_grads"

_MISSING = object()


def _finalize_module():
    # importlib returns the sys.modules entry: the attribute
    # ``megatron.core.distributed.finalize_model_grads`` is shadowed by the function.
    return importlib.import_module(FINALIZE_MODULE)


def _detect_flavor(mod) -> str:
    """'legacy' = megatron-core 0.13 (``_get_main_grad_attr(param, use_custom_fsdp)``, TP group
    from parallel_state, no None-grad skip); 'modern' = 0.15+ (``tp_group`` argument,
    ``_get_main_grad_attr(param)``, None grads skipped, megatron-FSDP ``_local_tensor``)."""
    try:
        n_attr_params = len(inspect.signature(mod._get_main_grad_attr).parameters)
    except (AttributeError, TypeError, ValueError) as exc:
        raise RuntimeError(f"tern: unsupported megatron-core: {FINALIZE_MODULE} lacks "
                           "_get_main_grad_attr") from exc
    has_tp_helper = hasattr(mod, "get_tensor_model_parallel_group_if_none")
    if n_attr_params == 2 and not has_tp_helper:
        return "legacy"
    if n_attr_params == 1 and has_tp_helper:
        return "modern"
    raise RuntimeError(
        "tern: unsupported megatron-core layout of finalize_model_grads "
        f"(_get_main_grad_attr takes {n_attr_params} args, "
        f"get_tensor_model_parallel_group_if_none present: {has_tp_helper})"
    )


def _reduce_in_chunks(grads: List[Any], op, group, bucket_mb: float) -> None:
    """All-reduce ``grads`` in place, chunk by chunk, with values identical to flattening
    them all into one buffer of their promoted dtype and all-reducing that."""
    import torch

    dtype = coalesced_dtype(grads)
    plan = split_into_chunks(grads, bucket_mb, dtype)
    if not plan:
        # Upstream still issues one (empty) collective when every selected grad is empty.
        buf = torch.empty(0, dtype=dtype, device=grads[0].device)
        torch.distributed.all_reduce(buf, op=op, group=group)
        return

    flats: Dict[int, Any] = {}
    staged: Dict[int, Any] = {}

    def flat(i: int):
        f = flats.get(i)
        if f is None:
            g = grads[i]
            if g.is_contiguous():
                f = g.view(-1)
            else:  # stage through a contiguous copy, written back once fully reduced
                staged[i] = g.contiguous()
                f = staged[i].view(-1)
            flats[i] = f
        return f

    for chunk in plan:
        numel = sum(seg.numel for seg in chunk)
        buf = torch.empty(numel, dtype=dtype, device=grads[chunk[0].index].device)
        off = 0
        for seg in chunk:
            buf[off : off + seg.numel].copy_(flat(seg.index)[seg.start : seg.stop])
            off += seg.numel
        torch.distributed.all_reduce(buf, op=op, group=group)
        off = 0
        for seg in chunk:
            flat(seg.index)[seg.start : seg.stop].copy_(buf[off : off + seg.numel])
            off += seg.numel
        del buf
    for i, contiguous_copy in staged.items():
        grads[i].copy_(contiguous_copy.view_as(grads[i]))


def chunked_allreduce_non_tensor_model_parallel_grads(
    model: List[Any], config: Any, tp_group: Optional[Any] = None, *, bucket_mb: float
) -> None:
    """Drop-in equivalent of upstream ``_allreduce_non_tensor_model_parallel_grads`` for the
    installed megatron-core version, all-reducing through buffers of at most ``bucket_mb`` MiB.

    Selection, reduce op (SUM for sequence-parallel / q_layernorm / k_layernorm params, AVG for
    ``average_gradients_across_tp_domain`` params; SUM group first), grad attribute
    (``main_grad`` / ``grad`` / ``fsdp_managed_main_grad``), DTensor unshard/reshard, the write
    back through ``setattr`` and the buffer dtype all follow the installed version's upstream code.
    """
    import torch

    mib_to_bytes(bucket_mb)  # validate early
    mod = _finalize_module()
    flavor = _detect_flavor(mod)

    if flavor == "legacy":
        if tp_group is None:
            if mod.parallel_state.get_tensor_model_parallel_world_size() <= 1:
                return
            tp_group = mod.parallel_state.get_tensor_model_parallel_group()
        elif tp_group.size() <= 1:
            return

        def grad_attr_of(param, ddp_config):
            return mod._get_main_grad_attr(param, ddp_config.use_custom_fsdp)

    else:
        tp_group = mod.get_tensor_model_parallel_group_if_none(tp_group)
        if tp_group.size() <= 1:
            return

        def grad_attr_of(param, ddp_config):
            return mod._get_main_grad_attr(param)

    params_sum: List[Any] = []
    grads_sum: List[Any] = []
    params_avg: List[Any] = []
    grads_avg: List[Any] = []

    ddp_config = None
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        for name, param in mod.get_attr_wrapped_model(model_chunk, "named_parameters")():
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
            if flavor == "legacy":
                params.append(param)
                grads.append(mod._unshard_if_dtensor(grad).data)  # None grad raises, as upstream
            else:
                if grad is None:
                    continue
                params.append(param)
                if ddp_config.use_megatron_fsdp:
                    grads.append(grad._local_tensor.data)
                else:
                    grads.append(mod._unshard_if_dtensor(grad).data)

    for params, grads, op in (
        (params_sum, grads_sum, torch.distributed.ReduceOp.SUM),
        (params_avg, grads_avg, torch.distributed.ReduceOp.AVG),
    ):
        if not grads:
            continue
        _reduce_in_chunks(grads, op, tp_group, bucket_mb)
        # Upstream's write-back uses the ddp_config left over from the selection loop
        # (the last model chunk's); mirrored on purpose.
        for param, buf in zip(params, grads):
            grad_attr = grad_attr_of(param, ddp_config)
            orig_grad = getattr(param, grad_attr)
            if flavor == "modern" and ddp_config.use_megatron_fsdp:
                setattr(param, grad_attr, orig_grad)
            else:
                setattr(param, grad_attr, mod._reshard_if_dtensor(buf, orig_grad))


class _ChunkedGradAllreducePatch:
    """Context manager returned by ``chunked_grad_allreduce``; single use, not re-entrant."""

    def __init__(self, bucket_mb: float):
        self.bucket_mb = bucket_mb
        self.bucket_bytes = mib_to_bytes(bucket_mb)  # validates; raises before any patching
        self.replacement = None
        self._module = None
        self._saved: Optional[Dict[str, Any]] = None
        self._used = False

    def __enter__(self):
        if self._used:
            raise RuntimeError("a chunked_grad_allreduce(...) context can be entered only once")
        self._used = True
        mod = _finalize_module()
        _detect_flavor(mod)  # refuse unknown versions before touching anything
        if not hasattr(mod, PATCHED_NAMES[0]):
            raise RuntimeError(f"tern: {FINALIZE_MODULE} has no {PATCHED_NAMES[0]}")
        current = mod.__dict__[PATCHED_NAMES[0]]
        bucket_mb = self.bucket_mb

        def replacement(model, config, tp_group=None):
            return chunked_allreduce_non_tensor_model_parallel_grads(
                model, config, tp_group, bucket_mb=bucket_mb
            )

        replacement.__name__ = replacement.__qualname__ = REPLACEMENT_NAME
        replacement.__module__ = __name__
        replacement.__doc__ = chunked_allreduce_non_tensor_model_parallel_grads.__doc__
        replacement.tern_bucket_mb = bucket_mb
        replacement.tern_replaced = current

        saved = {name: mod.__dict__.get(name, _MISSING) for name in PATCHED_NAMES}
        self._module, self._saved, self.replacement = mod, saved, replacement
        try:
            for name in PATCHED_NAMES:
                # The alias is replaced only if it still aliases the main function.
                if name == PATCHED_NAMES[0] or saved[name] is current:
                    setattr(mod, name, replacement)
        except BaseException:
            self._restore()
            raise
        return self

    def _restore(self) -> None:
        mod, saved = self._module, self._saved
        if mod is None or saved is None:
            return
        for name, value in saved.items():
            if value is _MISSING:
                mod.__dict__.pop(name, None)
            else:
                setattr(mod, name, value)
        self._module = self._saved = None

    def __exit__(self, exc_type, exc, tb):
        self._restore()
        return False


def chunked_grad_allreduce(bucket_mb: float) -> _ChunkedGradAllreducePatch:
    """Context manager: inside it, Megatron's ``finalize_model_grads`` all-reduces the
    non-tensor-parallel grads in chunks of at most ``bucket_mb`` MiB (fractional allowed).

    On entry it replaces ``_allreduce_non_tensor_model_parallel_grads`` (and its alias
    ``_allreduce_layernorm_grads``) in ``megatron.core.distributed.finalize_model_grads``; on exit,
    even when the body raises, it puts back exactly the objects that were there. Nested uses
    restore in LIFO order. The budget is validated when this function is called.

        with chunked_grad_allreduce(bucket_mb=cfg.grad_bucket_mb):
            train()
    """
    return _ChunkedGradAllreducePatch(bucket_mb)
