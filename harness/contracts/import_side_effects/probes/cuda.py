"""The probe of CUDA initialisation (``cuda-init``): whether ``torch.cuda.is_initialized()`` flipped during the
call, when torch was imported before it."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from harness.contracts.import_side_effects.probes.base import Probe, SideEffect


class CudaProbe(Probe):
    """A CUDA context made by the call: an adapter that initialises CUDA at import does so before Megatron picks each
    rank's device."""

    kinds = ("cuda-init",)

    def start(self) -> None:
        self._torch = sys.modules.get("torch")
        self._before = _cuda_initialized(self._torch)

    def stop(self) -> None:
        self._after = _cuda_initialized(self._torch)

    def effects(self) -> Iterator[SideEffect]:
        if self._before is False and self._after:
            yield SideEffect("cuda-init", "torch.cuda", "CUDA was initialised")


def _cuda_initialized(torch: object) -> bool | None:
    is_initialized = getattr(getattr(torch, "cuda", None), "is_initialized", None)
    return bool(is_initialized()) if callable(is_initialized) else None
