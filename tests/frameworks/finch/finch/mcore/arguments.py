"""argparse options read by finch.mcore (optional helper)."""

from __future__ import annotations


def add_arguments(parser):
    """Add finch's Megatron-adapter options to an ``argparse`` parser; returns it."""
    g = parser.add_argument_group("finch megatron adapter")
    g.add_argument("--megatron-patches", dest="megatron_patches", nargs="*", default=None,
                   help="names of finch Megatron patches to apply")
    g.add_argument("--grad-chunk-bytes", dest="grad_chunk_bytes", type=int, default=None,
                   help="byte budget of one chunk of the non-TP grad all-reduce "
                        "(default: $FINCH_GRAD_CHUNK_BYTES, else 128 MiB)")
    g.add_argument("--freeze-patterns", dest="freeze_patterns", nargs="*", default=None,
                   help="regexes of parameter names to freeze")
    g.add_argument("--trainable-patterns", dest="trainable_patterns", nargs="*", default=None,
                   help="regexes of parameter names that alone stay trainable")
    return parser
