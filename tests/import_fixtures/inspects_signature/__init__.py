"""Picks the call shape of Megatron's ``_get_main_grad_attr`` at import, as an adapter for several targets does
(0.13 takes ``use_custom_fsdp``, later ones do not); only a Megatron that is not there at all is tolerated."""

import inspect

try:
    from megatron.core.distributed.finalize_model_grads import _get_main_grad_attr
except ImportError:
    _get_main_grad_attr = None

PARAMETERS = tuple(inspect.signature(_get_main_grad_attr).parameters) if _get_main_grad_attr is not None else ()
TAKES_FSDP_FLAG = "use_custom_fsdp" in PARAMETERS
