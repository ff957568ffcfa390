"""A package whose modules reach each other through relative imports."""

from . import helpers
from .helpers import GREETING


def greet(name: str) -> str:
    return helpers.greeting(name)


__all__ = ["GREETING", "greet"]
