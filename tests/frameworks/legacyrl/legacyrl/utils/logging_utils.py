"""Logger lookup for legacyrl: every module logs under the ``legacyrl`` hierarchy."""

from __future__ import annotations

import logging

ROOT_LOGGER_NAME = "legacyrl"


def get_logger(name: str) -> logging.Logger:
    """The logger for ``name``, placed under ``legacyrl`` when it is not already (``__name__`` usually is)."""
    if name != ROOT_LOGGER_NAME and not name.startswith(ROOT_LOGGER_NAME + "."):
        name = f"{ROOT_LOGGER_NAME}.{name}"
    return logging.getLogger(name)
