"""Correct adapter: reads the installed Megatron's API off a signature at import."""

import importlib
import inspect

try:
    _finalize = importlib.import_module("megatron.core.distributed.finalize_model_grads")
except ImportError:
    MAIN_GRAD_ATTR_PARAMETERS: tuple[str, ...] = ()
else:
    MAIN_GRAD_ATTR_PARAMETERS = tuple(inspect.signature(_finalize._get_main_grad_attr).parameters)
