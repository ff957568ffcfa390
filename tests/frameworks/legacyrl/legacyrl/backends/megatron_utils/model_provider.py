"""Model provider wrapper applying legacyrl's parameter freeze rules to the model Megatron builds.

``args.only_train_params_name_list``: regexes; when given, only parameters whose name matches one stay trainable.
``args.freeze_params_name_list``: regexes; parameters whose name matches one are frozen.
Both are read when the model is built, so the wrapper can be made before the arguments are final.
"""

import inspect
import re

from legacyrl.utils.logging_utils import get_logger

logger = get_logger(__name__)


def _freeze_parameters(model, args):
    train_only = [re.compile(p) for p in getattr(args, "only_train_params_name_list", None) or []]
    freeze = [re.compile(p) for p in getattr(args, "freeze_params_name_list", None) or []]
    if not train_only and not freeze:
        return
    frozen = 0
    for module in model if isinstance(model, list | tuple) else [model]:
        for name, param in module.named_parameters():
            if any(p.search(name) for p in freeze) or (train_only and not any(p.search(name) for p in train_only)):
                param.requires_grad = False
                frozen += 1
    logger.debug("froze %d parameters", frozen)


def wrap_model_provider_with_freeze(provider, args):
    """Wrap a Megatron model provider so the model it returns has legacyrl's freeze rules applied."""
    parameters = inspect.signature(provider).parameters
    takes_vp_stage = "vp_stage" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )

    def wrapped(pre_process=True, post_process=True, vp_stage=None):
        if takes_vp_stage:
            model = provider(pre_process=pre_process, post_process=post_process, vp_stage=vp_stage)
        else:
            model = provider(pre_process=pre_process, post_process=post_process)
        _freeze_parameters(model, args)
        return model

    return wrapped
