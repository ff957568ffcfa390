"""Logger lookup for modernrl: every module logs under the ``modernrl`` hierarchy."""

from __future__ import annotations

import logging

ROOT_LOGGER_NAME = "modernrl"


def get_logger(name: str) -> logging.Logger:
    """The logger for ``name``, placed under ``modernrl`` when it is not already (``__name__`` usually is)."""
    if name != ROOT_LOGGER_NAME and not name.startswith(ROOT_LOGGER_NAME + "."):
        name = f"{ROOT_LOGGER_NAME}.{name}"
    return logging.getLogger(name)
