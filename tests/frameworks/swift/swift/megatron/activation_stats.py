"""Per-layer activation statistics for Megatron-Core GPT models.

``instrument_model(model)`` swaps ``forward`` on every ``TransformerLayer``
*instance* of a built model (the class is never touched) for a wrapper bound to
that instance.  The wrapper calls the layer's original forward with exactly the
arguments it was given, returns exactly what it returned, and records the mean
absolute value of the output hidden states into a swift-owned dict.
``restore_model(model)`` puts every instance back as it was.

Nothing happens at import time: Megatron itself is imported lazily, on the
first ``instrument_model``/``restore_model`` call.
"""

from __future__ import annotations

import functools
import types
import warnings
import weakref
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

import torch

__all__ = [
    "ACTIVATION_STATS",
    "clear_activation_stats",
    "get_activation_stats",
    "instrument_model",
    "is_instrumented",
    "restore_model",
]

#: Default sink: qualified layer name -> mean |output hidden states| of the
#: layer's most recent (recorded) forward call, as a Python float.
ACTIVATION_STATS: Dict[str, float] = {}

# Layers instrumented by this process and not yet restored.  Weak, so swift
# never keeps a model alive.
_INSTRUMENTED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()

_MARKER = "_swift_saved_forward"

ModelLike = Union[torch.nn.Module, List[torch.nn.Module], Tuple[torch.nn.Module, ...]]


class _Saved(NamedTuple):
    """What the instance looked like before instrumentation."""

    had_instance_forward: bool  # was 'forward' in the instance __dict__?
    previous: Any  # that instance attribute (None if absent)
    previous_func: Optional[Callable]  # its __func__ if it was a method bound to the layer


# --------------------------------------------------------------------------- #
# Megatron access (lazy)
# --------------------------------------------------------------------------- #
def _transformer_layer_cls() -> type:
    try:
        from megatron.core.transformer.transformer_layer import TransformerLayer
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "swift.megatron.instrument_model needs megatron-core with "
            "megatron.core.transformer.transformer_layer.TransformerLayer "
            f"(import failed: {exc})"
        ) from exc
    fwd = _lookup_class_attr(TransformerLayer, "forward")
    if not isinstance(fwd, types.FunctionType):
        try:
            from megatron.core.package_info import __version__ as mcore_version
        except Exception:  # pragma: no cover
            mcore_version = "unknown"
        raise RuntimeError(
            "swift.megatron.instrument_model does not support megatron-core "
            f"{mcore_version}: TransformerLayer.forward is {type(fwd).__name__}, "
            "expected a plain method"
        )
    return TransformerLayer


def _lookup_class_attr(cls: type, name: str) -> Any:
    """Class-level attribute as found by normal lookup, without binding it."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(f"{cls.__qualname__} has no attribute {name!r}")


def _iter_named_layers(model: ModelLike, prefix: str, layer_cls: type) -> Iterator[Tuple[str, Any]]:
    """Yield (qualified name, layer) for every ``layer_cls`` instance, once each.

    ``model`` may be a module or a list/tuple of model chunks (virtual pipeline);
    chunk ``i`` contributes names prefixed with ``"{i}."``.
    """
    if isinstance(model, torch.nn.Module):
        chunks = [("", model)]
    elif isinstance(model, (list, tuple)):
        chunks = [(f"{i}.", m) for i, m in enumerate(model)]
    else:
        raise TypeError(f"expected a torch.nn.Module or a list of them, got {type(model).__name__}")
    seen = set()
    for chunk_prefix, chunk in chunks:
        if not isinstance(chunk, torch.nn.Module):
            raise TypeError(f"model chunk {chunk_prefix!r} is {type(chunk).__name__}, not a Module")
        for name, module in chunk.named_modules():
            if isinstance(module, layer_cls) and id(module) not in seen:
                seen.add(id(module))
                yield f"{prefix}{chunk_prefix}{name}", module


def _swift_wrapper_of(layer: torch.nn.Module) -> Optional[types.MethodType]:
    """The swift wrapper installed on ``layer``, or None."""
    fwd = layer.__dict__.get("forward")
    if isinstance(fwd, types.MethodType) and hasattr(fwd.__func__, _MARKER):
        return fwd
    return None


# --------------------------------------------------------------------------- #
# Recording
# --------------------------------------------------------------------------- #
def _recording_unsafe() -> bool:
    """True while tracing/capturing, where a host sync (``.item()``) is not allowed."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and getattr(compiler, "is_compiling", None) and compiler.is_compiling():
        return True
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return True
    return False


def _record(stats: Dict[str, float], name: str, output: Any) -> None:
    hidden = output[0] if isinstance(output, (tuple, list)) and len(output) > 0 else output
    if not isinstance(hidden, torch.Tensor) or hidden.is_meta or hidden.numel() == 0:
        return
    if _recording_unsafe():
        return
    with torch.no_grad():
        l1 = torch.linalg.vector_norm(hidden.detach(), ord=1, dtype=torch.float32)
        stats[name] = (l1 / hidden.numel()).item()


def _make_wrapper(layer: torch.nn.Module, name: str, stats: Dict[str, float]) -> Callable:
    """Build the function that becomes ``layer.forward`` (bound to ``layer``).

    The original forward is re-resolved through ``self`` on every call, so a
    deep copy of an instrumented model runs its own layers, not the source's.
    """
    had = "forward" in layer.__dict__
    previous = layer.__dict__.get("forward")
    previous_func = None
    if had and isinstance(previous, types.MethodType) and previous.__self__ is layer:
        previous_func = previous.__func__

    def forward(self, *args, **kwargs):
        if not had:
            original = _lookup_class_attr(type(self), "forward").__get__(self, type(self))
        elif previous_func is not None:
            original = types.MethodType(previous_func, self)
        else:
            original = previous
        output = original(*args, **kwargs)
        _record(stats, name, output)
        return output

    # Keep name/doc/signature of what is wrapped (a function taking ``self``).
    wrapped = _lookup_class_attr(type(layer), "forward") if not had else previous_func
    if isinstance(wrapped, types.FunctionType):
        functools.update_wrapper(forward, wrapped)
    setattr(forward, _MARKER, _Saved(had, previous, previous_func))
    return forward


# --------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------- #
def instrument_model(
    model: ModelLike, stats: Optional[Dict[str, float]] = None, *, prefix: str = ""
) -> Dict[str, float]:
    """Instrument every ``TransformerLayer`` instance of ``model``.

    Args:
        model: a built Megatron model (``GPTModel``, possibly wrapped in DDP /
            Float16Module) or a list of model chunks.
        stats: dict to record into; defaults to :data:`ACTIVATION_STATS`.
        prefix: prepended to every key.

    Returns:
        The dict being recorded into.  Keys are qualified module names
        (``"decoder.layers.0"``, ``"1.module.decoder.layers.3"`` for chunk 1 ...),
        values the mean absolute value of the layer's output hidden states
        (first element of the returned tuple) from its latest forward call.

    Raises:
        RuntimeError: if any layer is already instrumented by swift, or the
            installed megatron-core is unsupported.
    """
    layer_cls = _transformer_layer_cls()
    if stats is None:
        stats = ACTIVATION_STATS
    layers = list(_iter_named_layers(model, prefix, layer_cls))
    already = [name for name, layer in layers if _swift_wrapper_of(layer) is not None]
    if already:
        raise RuntimeError(
            "swift: these layers are already instrumented; call restore_model first: "
            + ", ".join(already)
        )
    if not layers:
        warnings.warn("swift.instrument_model: no TransformerLayer found in model", stacklevel=2)
    for name, layer in layers:
        layer.forward = types.MethodType(_make_wrapper(layer, name, stats), layer)
        _INSTRUMENTED.add(layer)
    return stats


def restore_model(model: ModelLike) -> int:
    """Undo :func:`instrument_model` on ``model``; returns the number of layers restored.

    Each instance gets back exactly what it had: no instance ``forward`` at all
    (the usual case, so the class method is used again), or the very object that
    was there before.  Layers that are not instrumented are left alone.

    Raises:
        RuntimeError: if a layer instrumented by swift had its ``forward``
            replaced by someone else afterwards (nothing is restored then).
    """
    layer_cls = _transformer_layer_cls()
    layers = list(_iter_named_layers(model, "", layer_cls))
    clobbered = [
        name for name, layer in layers if layer in _INSTRUMENTED and _swift_wrapper_of(layer) is None
    ]
    if clobbered:
        raise RuntimeError(
            "swift: forward of these layers was replaced after instrument_model; "
            "undo that patch first: " + ", ".join(clobbered)
        )
    restored = 0
    for _, layer in layers:
        wrapper = _swift_wrapper_of(layer)
        if wrapper is None:
            continue
        saved: _Saved = getattr(wrapper.__func__, _MARKER)
        if not saved.had_instance_forward:
            del layer.forward
        elif saved.previous_func is not None and saved.previous.__self__ is not layer:
            # A deep copy of an instrumented model: rebind the saved method to this copy.
            layer.forward = types.MethodType(saved.previous_func, layer)
        else:
            layer.forward = saved.previous
        _INSTRUMENTED.discard(layer)
        restored += 1
    return restored


def is_instrumented(model: ModelLike) -> bool:
    """True if any ``TransformerLayer`` of ``model`` carries a swift wrapper."""
    layer_cls = _transformer_layer_cls()
    return any(_swift_wrapper_of(l) is not None for _, l in _iter_named_layers(model, "", layer_cls))


def get_activation_stats() -> Dict[str, float]:
    """A copy of :data:`ACTIVATION_STATS`."""
    return dict(ACTIVATION_STATS)


def clear_activation_stats() -> None:
    """Empty :data:`ACTIVATION_STATS` (in place)."""
    ACTIVATION_STATS.clear()
