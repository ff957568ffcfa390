"""Defines functions and imports the standard library, and changes nothing."""

import colorsys
import functools
import logging

logger = logging.getLogger(__name__)


@functools.cache
def lightness(red: float, green: float, blue: float) -> float:
    return colorsys.rgb_to_hls(red, green, blue)[1]


def describe(value: object) -> str:
    logger.debug("describing %r", value)
    return repr(value)
