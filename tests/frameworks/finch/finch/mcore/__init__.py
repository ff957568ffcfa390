"""finch's Megatron-Core adapter.

Importing this package patches nothing, reads no environment variable,
configures no logging and imports neither torch nor Megatron.  Patches are
applied only by :func:`apply_patches`.
"""

from .arguments import add_arguments
from .registry import (
    AttrPatch,
    PatchHandle,
    PatchSpec,
    apply_patches,
    available_patches,
    get_patch,
    register_patch,
)
from .grad_allreduce import (
    DEFAULT_GRAD_CHUNK_BYTES,
    GRAD_CHUNK_BYTES_ENV,
    Segment,
    allreduce_in_chunks,
    make_chunked_allreduce,
    resolve_grad_chunk_bytes,
    split_into_chunks,
)
from . import log_patches  # noqa: F401  (registers "log_model_parallel_init")
from .provider import freeze_parameters, wrap

__all__ = [
    "add_arguments",
    "AttrPatch",
    "PatchHandle",
    "PatchSpec",
    "apply_patches",
    "available_patches",
    "get_patch",
    "register_patch",
    "DEFAULT_GRAD_CHUNK_BYTES",
    "GRAD_CHUNK_BYTES_ENV",
    "Segment",
    "allreduce_in_chunks",
    "make_chunked_allreduce",
    "resolve_grad_chunk_bytes",
    "split_into_chunks",
    "freeze_parameters",
    "wrap",
]
