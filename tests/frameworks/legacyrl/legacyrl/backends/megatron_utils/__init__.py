"""legacyrl's Megatron backend: process bootstrap.

Importing this package prepares the process for Megatron training: log levels from the environment
(``LEGACYRL_LOG_LEVEL``, ``LEGACYRL_DEBUG``, ``LEGACYRL_MEGATRON_LOG_LEVEL``) and the chunked gradient all-reduce,
which :mod:`.grad_chunking` patches into Megatron when it is imported.
"""

import logging
import os

from legacyrl.utils.logging_utils import ROOT_LOGGER_NAME, get_logger

_TRUE = ("1", "true", "yes", "on")


def _level_from_env(variable: str, default: str) -> int:
    value = os.environ.get(variable, default).strip().upper()
    level = logging.getLevelName(value)
    return level if isinstance(level, int) else logging.getLevelName(default)


_debug = os.environ.get("LEGACYRL_DEBUG", "0").strip().lower() in _TRUE
_level = logging.DEBUG if _debug else _level_from_env("LEGACYRL_LOG_LEVEL", "INFO")
_megatron_level = _level_from_env("LEGACYRL_MEGATRON_LOG_LEVEL", "WARNING")
logging.getLogger(ROOT_LOGGER_NAME).setLevel(_level)
logging.getLogger("megatron").setLevel(_megatron_level)

logger = get_logger(__name__)
logger.info(
    "megatron backend: log level %s, megatron log level %s",
    logging.getLevelName(_level),
    logging.getLevelName(_megatron_level),
)

from . import grad_chunking  # noqa: E402, F401  (applies the chunked grad all-reduce)
