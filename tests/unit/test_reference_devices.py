"""The reference subject's buffers follow the grads' device. Without a GPU the ``meta`` device stands in for CUDA:
a buffer made without a device would land on the CPU, which is what NCCL rejects."""

from __future__ import annotations

import torch

from harness.reference.allreduce import _staging_buffer


def test_the_staging_buffer_is_made_on_the_grads_device() -> None:
    grads = [torch.empty(3, 4, device="meta").t(), torch.empty(5, device="meta")]
    buffer = _staging_buffer([([None, None], grads)], torch.float32)
    assert buffer.device == torch.device("meta")
    assert buffer.numel() == 17
