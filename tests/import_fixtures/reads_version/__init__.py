"""Picks its code path by the installed Megatron's version at import, as ms-swift and mcore-bridge do: a fake of
``megatron.core`` carries the real one's ``__version__``, so the import runs beside the fakes as it does beside the
real Megatron."""

import megatron.core

MEGATRON_VERSION = tuple(int(part) for part in megatron.core.__version__.split(".")[:2])
