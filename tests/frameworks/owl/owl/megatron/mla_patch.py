"""Pin Megatron-Core's Multi-Latent Attention to the 0.13.1 implementation.

``apply_mla_patch()`` replaces, as class attributes in
``megatron.core.transformer.multi_latent_attention``:

* ``MultiLatentAttention.forward``
  -> ``owl.megatron.mla_0_13_1.mla_forward_0_13_1``
* ``MLASelfAttention.get_query_key_value_tensors``
  -> ``owl.megatron.mla_0_13_1.mla_get_query_key_value_tensors_0_13_1``

``undo_mla_patch()`` puts the original function objects back.

This module imports nothing from Megatron at import time.
"""

import inspect
import threading

__all__ = ["apply_mla_patch", "undo_mla_patch", "is_mla_patch_applied"]

_MLA_MODULE = "megatron.core.transformer.multi_latent_attention"

# (major, minor) range the 0.13.1 copies are known to run on (0.13.1, 0.15.3,
# 0.16.1 and 0.19.2 were checked; versions in between are accepted subject to
# the structural checks in _check_megatron()).
_MIN_VERSION = (0, 13)
_MAX_VERSION = (0, 19)

_MISSING = object()
_lock = threading.Lock()
# While applied: list of (owner class, attribute name, original __dict__ entry, replacement).
_applied = None


def is_mla_patch_applied():
    """Return True while :func:`apply_mla_patch` is in effect."""
    return _applied is not None


def _megatron_version():
    from megatron.core import package_info

    return (int(package_info.MAJOR), int(package_info.MINOR), int(package_info.PATCH))


def _check_megatron(mla_mod):
    """Raise RuntimeError if this Megatron cannot run the 0.13.1 copies."""
    version = _megatron_version()
    vstr = ".".join(map(str, version))
    if not (_MIN_VERSION <= version[:2] <= _MAX_VERSION):
        raise RuntimeError(
            f"owl MLA patch supports megatron-core "
            f"{'.'.join(map(str, _MIN_VERSION))}.x to {'.'.join(map(str, _MAX_VERSION))}.x; "
            f"found {vstr}."
        )

    problems = []
    mla_cls = getattr(mla_mod, "MultiLatentAttention", None)
    self_cls = getattr(mla_mod, "MLASelfAttention", None)
    if mla_cls is None or "forward" not in vars(mla_cls):
        problems.append("MultiLatentAttention.forward is missing")
    if self_cls is None or "get_query_key_value_tensors" not in vars(self_cls):
        problems.append("MLASelfAttention.get_query_key_value_tensors is missing")
    for meth in ("_adjust_key_value_for_inference", "_checkpointed_attention_forward"):
        if mla_cls is not None and not callable(getattr(mla_cls, meth, None)):
            problems.append(f"Attention.{meth} is missing")

    from megatron.core.models.common.embeddings import RotaryEmbedding, apply_rotary_pos_emb

    params = inspect.signature(apply_rotary_pos_emb).parameters
    for p in ("cu_seqlens", "mscale", "cp_group"):
        if p not in params:
            problems.append(f"apply_rotary_pos_emb() has no {p!r} parameter")
    if not hasattr(RotaryEmbedding, "get_rotary_seq_len"):
        problems.append("RotaryEmbedding.get_rotary_seq_len is missing")

    if problems:
        raise RuntimeError(
            f"owl MLA patch cannot be applied to megatron-core {vstr}: " + "; ".join(problems)
        )


def apply_mla_patch():
    """Install megatron-core 0.13.1's MLA ``forward`` / ``get_query_key_value_tensors``.

    Idempotent: calling it while applied does nothing.  Raises ``RuntimeError``
    (and changes nothing) if the installed Megatron cannot be supported.
    """
    global _applied
    with _lock:
        if _applied is not None:
            return
        import importlib

        mla_mod = importlib.import_module(_MLA_MODULE)
        _check_megatron(mla_mod)
        try:
            from owl.megatron import mla_0_13_1 as copies
        except ImportError as exc:  # a Megatron symbol the copies need is gone
            raise RuntimeError(
                f"owl MLA patch cannot be applied to megatron-core "
                f"{'.'.join(map(str, _megatron_version()))}: {exc}"
            ) from exc

        plan = [
            (mla_mod.MultiLatentAttention, "forward", copies.mla_forward_0_13_1),
            (
                mla_mod.MLASelfAttention,
                "get_query_key_value_tensors",
                copies.mla_get_query_key_value_tensors_0_13_1,
            ),
        ]
        applied = []
        for owner, name, new in plan:
            applied.append((owner, name, vars(owner).get(name, _MISSING), new))
        for owner, name, _orig, new in applied:
            setattr(owner, name, new)
        _applied = applied


def undo_mla_patch():
    """Restore the original Megatron methods.  Does nothing if not applied.

    Raises ``RuntimeError`` (and restores nothing) if another party has
    replaced one of the patched attributes since :func:`apply_mla_patch`.
    """
    global _applied
    with _lock:
        if _applied is None:
            return
        for owner, name, _orig, new in _applied:
            if vars(owner).get(name, _MISSING) is not new:
                raise RuntimeError(
                    f"owl MLA patch: {owner.__qualname__}.{name} was replaced by someone "
                    "else after apply_mla_patch(); refusing to overwrite it."
                )
        for owner, name, orig, _new in reversed(_applied):
            if orig is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)
        _applied = None
