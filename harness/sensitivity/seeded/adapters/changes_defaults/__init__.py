"""Seeded adapter: changes the default arguments of Megatron's finalize_model_grads in place at import (num_tokens
defaults to 0 instead of None)."""

import importlib

_finalize = importlib.import_module("megatron.core.distributed.finalize_model_grads").finalize_model_grads
_finalize.__defaults__ = (0, *_finalize.__defaults__[1:])
