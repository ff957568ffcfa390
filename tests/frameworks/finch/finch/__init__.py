"""finch: an LLM/RL training framework built on Megatron-Core.

The framework's logging setup lives here (:func:`setup_logging`), but it is
*not* run at import time: importing ``finch`` (which every import of the
Megatron adapter ``finch.mcore`` does first) must not configure logging or
touch any other global state.  Entry points (trainers, scripts) call
``finch.setup_logging()`` once, at startup.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "setup_logging", "LOG_FORMAT"]

LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s] %(message)s"


def setup_logging(level=None, fmt=LOG_FORMAT, force=False):
    """Configure the root logger for a finch process (idempotent).

    Adds one stream handler to the root logger (``logging.basicConfig``),
    unless the root logger already has handlers and ``force`` is false.
    ``level`` defaults to the ``FINCH_LOG_LEVEL`` environment variable, else INFO.
    Returns the root logger.
    """
    import logging
    import os

    if level is None:
        level = os.environ.get("FINCH_LOG_LEVEL", "INFO")
    if isinstance(level, str):
        level = level.upper()
    logging.basicConfig(level=level, format=fmt, force=force)
    root = logging.getLogger()
    return root
