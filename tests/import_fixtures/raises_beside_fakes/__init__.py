"""Checks the installed Megatron's version at import: a real Megatron has one, a fake does not, so beside the fakes the
import raises (an ``AttributeError``, no ``ImportError``), and nothing else happens on the way."""

import megatron.core

MEGATRON_VERSION = tuple(int(part) for part in megatron.core.__version__.split(".")[:2])
