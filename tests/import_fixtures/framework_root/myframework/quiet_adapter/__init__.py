"""An adapter that never imports its framework package: loading it must not run ``myframework/__init__.py``."""

from .impl import VALUE

__all__ = ["VALUE"]
