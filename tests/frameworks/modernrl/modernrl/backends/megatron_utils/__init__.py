"""modernrl's Megatron backend: process bootstrap.

Importing this package sets log levels from the environment (``MODERNRL_LOG_LEVEL``, ``MODERNRL_DEBUG``,
``MODERNRL_MEGATRON_LOG_LEVEL``) and, where DeepEP is installed, gives ``deep_ep.Buffer`` modernrl's default for
``explicitly_destroy``. It does not touch Megatron: the trainer calls :func:`apply_grad_chunking_patch` once it has
read its configuration.
"""

import functools
import logging
import os

from modernrl.utils.logging_utils import ROOT_LOGGER_NAME, get_logger

from .grad_chunking import apply_grad_chunking_patch, remove_grad_chunking_patch

__all__ = ["apply_grad_chunking_patch", "remove_grad_chunking_patch"]

_TRUE = ("1", "true", "yes", "on")


def _level_from_env(variable: str, default: str) -> int:
    value = os.environ.get(variable, default).strip().upper()
    level = logging.getLevelName(value)
    return level if isinstance(level, int) else logging.getLevelName(default)


_debug = os.environ.get("MODERNRL_DEBUG", "0").strip().lower() in _TRUE
_level = logging.DEBUG if _debug else _level_from_env("MODERNRL_LOG_LEVEL", "INFO")
_megatron_level = _level_from_env("MODERNRL_MEGATRON_LOG_LEVEL", "WARNING")
logging.getLogger(ROOT_LOGGER_NAME).setLevel(_level)
logging.getLogger("megatron").setLevel(_megatron_level)

logger = get_logger(__name__)
logger.info(
    "megatron backend: log level %s, megatron log level %s",
    logging.getLevelName(_level),
    logging.getLevelName(_megatron_level),
)


def _patch_deep_ep_buffer(buffer_cls) -> None:
    """Make ``Buffer(...)`` destroy its communication buffers explicitly unless the caller says otherwise: the
    implicit destructor hangs at interpreter exit when the process group is already gone."""
    original = buffer_cls.__init__
    if getattr(original, "_modernrl_patched", False):
        return

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("explicitly_destroy", True)
        original(self, *args, **kwargs)

    __init__._modernrl_patched = True
    buffer_cls.__init__ = __init__


try:
    import deep_ep
except ImportError:
    pass
else:
    _patch_deep_ep_buffer(deep_ep.Buffer)
