"""What PyTorch's CUDA caching allocator counts for a tensor of ``n`` bytes, so a memory bound is judged in its terms.

On a GPU, ``torch.cuda.max_memory_allocated`` does not count a tensor's bytes but the block the allocator handed
out for it, and ``memory_reserved`` counts the segments it took from the driver to cut blocks from. A 40-byte staging
buffer holds a 512-byte block; a bound written in raw bytes (80 for a 40-byte chunk) would call that design unbounded.
The rules below are those of ``c10/cuda/CUDACachingAllocator.cpp`` under the default configuration (no
``roundup_power2_divisions``, no ``max_split_size_mb``, no expandable segments); with those set through
``PYTORCH_CUDA_ALLOC_CONF`` a GPU's figures may differ and the bound is judged on the measured peak alone.

- A block is the request rounded up to a multiple of 512 bytes (512 at least); a request of 0 bytes takes none.
- Requests up to 1 MiB come from the small pool, cut from 2 MiB segments; larger ones from the large pool, cut from
  20 MiB segments below 10 MiB and from their own segment (rounded up to 2 MiB) above.
- A cached large block is split only when more than 1 MiB would remain, so a large request may be handed a block up
  to 1 MiB larger than its rounded size, and ``memory_allocated`` counts all of it. Small blocks always split (their
  remainders are multiples of 512).
"""

from __future__ import annotations

MIN_BLOCK_BYTES = 512
"""Every block is a multiple of this (``kMinBlockSize``)."""
SMALL_REQUEST_BYTES = 1 << 20
"""The largest request served from the small pool (``kSmallSize``); also the remainder a large block keeps unsplit."""
SMALL_SEGMENT_BYTES = 2 << 20
"""The segment the small pool reserves when it has no free block (``kSmallBuffer``)."""
LARGE_SEGMENT_BYTES = 20 << 20
"""The segment a large request under ``MIN_LARGE_ALLOC_BYTES`` reserves (``kLargeBuffer``)."""
MIN_LARGE_ALLOC_BYTES = 10 << 20
"""From here on a large request reserves a segment of its own (``kMinLargeAlloc``)."""
LARGE_ROUNDING_BYTES = 2 << 20
"""A segment of its own is rounded up to a multiple of this (``kRoundLarge``)."""


def _round_up(nbytes: int, multiple: int) -> int:
    return -(-nbytes // multiple) * multiple


def block_bytes(nbytes: int) -> int:
    """The block a request of ``nbytes`` is rounded to: what ``memory_allocated`` grows by when it is split exactly."""
    if nbytes <= 0:
        return 0
    return _round_up(max(nbytes, MIN_BLOCK_BYTES), MIN_BLOCK_BYTES)


def allocated_bytes_at_most(nbytes: int) -> int:
    """The most ``memory_allocated`` may grow by for one request of ``nbytes``: its block, plus for a large request
    the remainder of a cached block too small to be split off (1 MiB at most)."""
    block = block_bytes(nbytes)
    if block <= SMALL_REQUEST_BYTES:
        return block
    return block + SMALL_REQUEST_BYTES


def segment_bytes(nbytes: int) -> int:
    """What ``memory_reserved`` grows by when a request of ``nbytes`` finds no cached block that fits."""
    if nbytes <= 0:
        return 0
    if nbytes <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if nbytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_SEGMENT_BYTES
    return _round_up(nbytes, LARGE_ROUNDING_BYTES)
