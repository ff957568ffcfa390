"""Chunked replacement for Megatron's TP all-reduce of non-tensor-parallel grads.

Upstream ``megatron.core.distributed.finalize_model_grads._allreduce_non_tensor_model_parallel_grads``
(alias ``_allreduce_layernorm_grads``) flattens every selected grad into ONE buffer per
reduce op (SUM for sequence-parallel / qk-layernorm params, AVG for params marked
``average_gradients_across_tp_domain``).  :func:`install` swaps both module attributes for
:func:`chunked_allreduce_non_tensor_model_parallel_grads`, which selects the same grads but
all-reduces them chunk by chunk, each chunk's flat buffer being at most ``chunk_bytes``.

Importing this module patches nothing and imports no Megatron module.
"""

import contextlib
import functools
import importlib
import inspect
from typing import Dict, List, Optional, Sequence

import torch

__all__ = [
    "chunked_allreduce_non_tensor_model_parallel_grads",
    "install",
    "installed_chunk_bytes",
    "is_installed",
    "patched",
    "split_grads_by_dtype",
    "uninstall",
]

_FMG_MODULE = "megatron.core.distributed.finalize_model_grads"
# Module attributes that upstream binds to the function (the second is the legacy alias).
_PATCHED_NAMES = ("_allreduce_non_tensor_model_parallel_grads", "_allreduce_layernorm_grads")


class _PatchState:
    """Process-local patch bookkeeping (module-private; nothing is set at import)."""

    def __init__(self) -> None:
        self.installed = False
        self.chunk_bytes: Optional[int] = None
        self.module = None
        self.saved: Dict[str, object] = {}
        self.dialect = None


_state = _PatchState()


def _check_budget(chunk_bytes) -> int:
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int):
        raise TypeError(f"chunk_bytes must be an int (bytes), got {type(chunk_bytes).__name__}")
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
    return chunk_bytes


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


# --------------------------------------------------------------------------- splitter


def split_grads_by_dtype(
    grads: Sequence[torch.Tensor],
    chunk_bytes: int,
    buffer_dtype: Optional[torch.dtype] = None,
) -> List[List[torch.Tensor]]:
    """Split ``grads`` into chunks whose flattened buffer is at most ``chunk_bytes``.

    Grads are first grouped by dtype (groups ordered by first appearance), so every chunk
    holds a single dtype.  Within a dtype the grads are packed greedily in their given
    order: a new chunk starts when adding the next grad would exceed ``chunk_bytes``.  A
    grad that alone exceeds the budget gets a chunk of its own.

    The size of a grad is ``numel * itemsize``, the itemsize being that of ``buffer_dtype``
    when given (the dtype the flat buffer will be reduced in), else the grad's own dtype.

    Returns a list of chunks, each a list of the very tensor objects passed in.
    """
    chunk_bytes = _check_budget(chunk_bytes)
    by_dtype: Dict[torch.dtype, List[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)

    chunks: List[List[torch.Tensor]] = []
    for dtype, tensors in by_dtype.items():
        itemsize = _itemsize(buffer_dtype if buffer_dtype is not None else dtype)
        current: List[torch.Tensor] = []
        current_bytes = 0
        for t in tensors:
            nbytes = t.numel() * itemsize
            if current and current_bytes + nbytes > chunk_bytes:
                chunks.append(current)
                current, current_bytes = [], 0
            current.append(t)
            current_bytes += nbytes
        if current:
            chunks.append(current)
    return chunks


# --------------------------------------------------------------------------- version dialect


class _Dialect:
    """How the installed Megatron version selects grads (read from its own source objects)."""

    def __init__(self, fmg, original) -> None:
        self.module = fmg
        # 0.13.x: _get_main_grad_attr(param, use_custom_fsdp); no tp_group argument.
        self.legacy_grad_attr = "use_custom_fsdp" in inspect.signature(
            fmg._get_main_grad_attr
        ).parameters
        self.takes_tp_group = original is not None and "tp_group" in inspect.signature(
            original
        ).parameters
        self.has_group_if_none = hasattr(fmg, "get_tensor_model_parallel_group_if_none")


def _load_fmg():
    return importlib.import_module(_FMG_MODULE)


def _find_original(fmg):
    for name in _PATCHED_NAMES:
        fn = fmg.__dict__.get(name)
        if fn is not None and fn is not chunked_allreduce_non_tensor_model_parallel_grads:
            return fn
    return None


def _current_dialect() -> _Dialect:
    if _state.installed and _state.dialect is not None:
        return _state.dialect
    fmg = _load_fmg()
    return _Dialect(fmg, _find_original(fmg))


# --------------------------------------------------------------------------- replacement


class _Entry:
    __slots__ = ("param", "grad_attr", "grad", "keep_orig")

    def __init__(self, param, grad_attr, grad, keep_orig):
        self.param = param
        self.grad_attr = grad_attr
        self.grad = grad  # plain tensor reduced in place (upstream's ``buf``)
        self.keep_orig = keep_orig  # megatron-fsdp: write back the original grad object


def _tensor_key(t: torch.Tensor):
    return (t.device, t.dtype, t.data_ptr(), tuple(t.size()), tuple(t.stride()))


def _all_reduce(tensor, op, group):
    # Looked up at call time, like upstream, so wrappers of torch.distributed apply.
    torch.distributed.all_reduce(tensor, op=op, group=group)


def _reduce_chunk(chunk: List[torch.Tensor], reduce_dtype, op, group, chunk_bytes: int) -> None:
    """All-reduce one single-dtype chunk in a buffer of ``reduce_dtype`` and write back."""
    if len(chunk) == 1:
        # A lone grad (possibly larger than the budget): reduce its flat view in slices of
        # at most chunk_bytes; in place when no cast is needed (no extra buffer at all).
        t = chunk[0]
        contiguous = t.is_contiguous()
        flat = t.view(-1) if contiguous else t.reshape(-1)
        step = max(1, chunk_bytes // _itemsize(reduce_dtype))
        for start in range(0, flat.numel(), step):
            piece = flat[start : start + step]
            if piece.dtype == reduce_dtype:
                _all_reduce(piece, op, group)
            else:
                tmp = piece.to(reduce_dtype)
                _all_reduce(tmp, op, group)
                piece.copy_(tmp)
        if not contiguous:
            t.copy_(flat.view_as(t))
        return

    total = sum(t.numel() for t in chunk)
    buf = torch.empty(total, dtype=reduce_dtype, device=chunk[0].device)
    offset = 0
    for t in chunk:
        n = t.numel()
        buf[offset : offset + n].copy_(t.reshape(-1))
        offset += n
    _all_reduce(buf, op, group)
    offset = 0
    for t in chunk:
        n = t.numel()
        t.copy_(buf[offset : offset + n].view_as(t))
        offset += n


def _write_back(fmg, dialect: _Dialect, entry: _Entry) -> None:
    """Same attribute update upstream does after ``buf.copy_(synced)``."""
    param = entry.param
    orig_grad = getattr(param, entry.grad_attr)
    if entry.keep_orig:
        setattr(param, entry.grad_attr, orig_grad)
    else:
        setattr(param, entry.grad_attr, fmg._reshard_if_dtensor(entry.grad, orig_grad))


def _reduce_group(fmg, dialect, entries: List[_Entry], op, group, chunk_bytes: int) -> None:
    # Identical grad views (a param listed twice) are reduced once, as upstream's single
    # snapshot-reduce-copy does; every entry still gets its write-back.
    seen = set()
    unique: List[torch.Tensor] = []
    for e in entries:
        key = _tensor_key(e.grad)
        if key not in seen:
            seen.add(key)
            unique.append(e.grad)

    # Upstream's torch.cat promotes a mixed-dtype list to one dtype; keep those semantics.
    reduce_dtype = functools.reduce(torch.promote_types, (t.dtype for t in unique))

    for chunk in split_grads_by_dtype(unique, chunk_bytes, buffer_dtype=reduce_dtype):
        _reduce_chunk(chunk, reduce_dtype, op, group, chunk_bytes)

    # Write-back after the whole op group is reduced, in upstream's param order.
    for e in entries:
        _write_back(fmg, dialect, e)


def chunked_allreduce_non_tensor_model_parallel_grads(
    model: List[torch.nn.Module],
    config,
    tp_group: Optional["torch.distributed.ProcessGroup"] = None,
    *,
    chunk_bytes: Optional[int] = None,
) -> None:
    """Drop-in for upstream ``_allreduce_non_tensor_model_parallel_grads``, chunked.

    Selects the same grads as the running Megatron version, reduces SUM grads and AVG
    grads over the TP group chunk by chunk (each flat buffer at most ``chunk_bytes``,
    default: the budget given to :func:`install`), writes results back in place.
    """
    if chunk_bytes is None:
        if not _state.installed:
            raise RuntimeError(
                "petrel chunked all-reduce called without a budget: call "
                "petrel.mcore.install(chunk_bytes) or pass chunk_bytes="
            )
        chunk_bytes = _state.chunk_bytes
    chunk_bytes = _check_budget(chunk_bytes)

    dialect = _current_dialect()
    fmg = dialect.module

    if dialect.has_group_if_none:
        tp_group = fmg.get_tensor_model_parallel_group_if_none(tp_group)
        if tp_group.size() <= 1:
            return
    elif tp_group is None:
        if fmg.parallel_state.get_tensor_model_parallel_world_size() <= 1:
            return
        tp_group = fmg.parallel_state.get_tensor_model_parallel_group()
    elif tp_group.size() <= 1:
        return

    entries_sum: List[_Entry] = []
    entries_avg: List[_Entry] = []
    for model_chunk in model:
        ddp_config = model_chunk.ddp_config
        for name, param in fmg.get_attr_wrapped_model(model_chunk, "named_parameters")():
            if not param.requires_grad:
                continue
            if getattr(param, "average_gradients_across_tp_domain", False):
                bucket = entries_avg
            elif (config.sequence_parallel and getattr(param, "sequence_parallel", False)) or (
                config.qk_layernorm and ("q_layernorm" in name or "k_layernorm" in name)
            ):
                bucket = entries_sum
            else:
                continue
            if dialect.legacy_grad_attr:
                grad_attr = fmg._get_main_grad_attr(param, ddp_config.use_custom_fsdp)
                use_fsdp_local = False
            else:
                grad_attr = fmg._get_main_grad_attr(param)
                use_fsdp_local = bool(getattr(ddp_config, "use_megatron_fsdp", False))
            grad = getattr(param, grad_attr)
            if grad is None:
                continue
            if use_fsdp_local:
                data = grad._local_tensor.data
            else:
                data = fmg._unshard_if_dtensor(grad).data
            bucket.append(_Entry(param, grad_attr, data, use_fsdp_local))

    for entries, op in (
        (entries_sum, torch.distributed.ReduceOp.SUM),
        (entries_avg, torch.distributed.ReduceOp.AVG),
    ):
        if entries:
            _reduce_group(fmg, dialect, entries, op, tp_group, chunk_bytes)


# --------------------------------------------------------------------------- apply / undo


def install(chunk_bytes: int) -> None:
    """Patch Megatron so ``finalize_model_grads`` uses the chunked all-reduce.

    ``chunk_bytes`` (required, int > 0) is the byte budget of one chunk's flat buffer.
    Calling ``install`` again while installed only replaces the budget.
    """
    chunk_bytes = _check_budget(chunk_bytes)
    if _state.installed:
        _state.chunk_bytes = chunk_bytes
        return
    fmg = _load_fmg()
    saved = {name: fmg.__dict__[name] for name in _PATCHED_NAMES if name in fmg.__dict__}
    original = _find_original(fmg)
    if original is None:
        raise RuntimeError(f"{_FMG_MODULE} has none of {_PATCHED_NAMES}; unsupported Megatron")
    dialect = _Dialect(fmg, original)
    _state.module, _state.saved, _state.dialect = fmg, saved, dialect
    _state.chunk_bytes = chunk_bytes
    for name in saved:
        setattr(fmg, name, chunked_allreduce_non_tensor_model_parallel_grads)
    _state.installed = True


def uninstall() -> None:
    """Restore exactly the module attributes :func:`install` replaced. No-op if not installed."""
    if not _state.installed:
        return
    fmg = _state.module
    for name, value in _state.saved.items():
        setattr(fmg, name, value)
    _state.installed = False
    _state.chunk_bytes = None
    _state.module = None
    _state.saved = {}
    _state.dialect = None


def is_installed() -> bool:
    return _state.installed


def installed_chunk_bytes() -> Optional[int]:
    """The active budget in bytes, or None when not installed."""
    return _state.chunk_bytes if _state.installed else None


@contextlib.contextmanager
def patched(chunk_bytes: int):
    """``with patched(n):`` -- install for the block, uninstall after (if it installed)."""
    was_installed = _state.installed
    previous = _state.chunk_bytes
    install(chunk_bytes)
    try:
        yield
    finally:
        if was_installed:
            _state.chunk_bytes = previous
        else:
            uninstall()
