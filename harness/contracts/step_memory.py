"""Is the chunked patch still needed on this target, and is it enough? Measured on a real ``finalize_model_grads``
step, not on a population made for the purpose.

Both runs of the real GPT step (upstream's, the subject's) are tracked with :class:`SiteTracker`: the step's peak of
live tensor bytes, and for every function of Megatron's ``finalize_model_grads`` module the largest tensor it made.
What the subject must bound are the step's *coalesced reductions*: the functions of that module that flatten grads
into one buffer (they call ``_flatten_dense_tensors``) and that ``finalize_model_grads`` calls. Read from the
installed code, so a reduction a release adds is named by its own name. One the subject did not replace, and that
allocated during the subject's step, holds its grads in one buffer whatever the budget: it is named, with its bytes.
One the configurations here do not exercise (pipeline-parallel embeddings, MoE routers) is named apart, as reachable
but not measured.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from types import CodeType, ModuleType
from typing import Any

import torch

from harness.contracts.allocations import AllocationTracker
from harness.targets.megatron_names import FINALIZE_MODULE

FLATTEN = "_flatten_dense_tensors"


@dataclass
class StepMemory:
    """One rank's view of one configuration's step: both peaks, what each coalesced reduction allocated under the
    subject, and which of them the subject replaced."""

    upstream_peak_bytes: int = 0
    subject_peak_bytes: int = 0
    reductions: list[str] = field(default_factory=list)
    """The step's coalesced reductions, in source order."""
    replaced: list[str] = field(default_factory=list)
    """Those the subject's ``install()`` bound something else in place of."""
    subject_sites: dict[str, int] = field(default_factory=dict)
    """Largest tensor each function of the finalize module made during the subject's step."""
    upstream_sites: dict[str, int] = field(default_factory=dict)

    def unbounded(self) -> dict[str, int]:
        """Coalesced reductions that ran in the subject's step untouched by it, with the buffer each made."""
        return {
            name: self.subject_sites[name]
            for name in self.reductions
            if name not in self.replaced and self.subject_sites.get(name, 0) > 0
        }

    def not_exercised(self) -> list[str]:
        """Coalesced reductions the subject left in place that made nothing in either run of this configuration."""
        return [
            name
            for name in self.reductions
            if name not in self.replaced and not self.subject_sites.get(name) and not self.upstream_sites.get(name)
        ]


def _names(code: CodeType) -> set[str]:
    """Every global name ``code`` and the functions nested in it refer to."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            names |= _names(constant)
    return names


def coalesced_reductions(module: ModuleType) -> list[str]:
    """The functions of the finalize module that ``finalize_model_grads`` calls and that flatten grads into one
    buffer, in source order."""
    called = _names(inspect.unwrap(module.finalize_model_grads).__code__)
    found = []
    for name, value in vars(module).items():
        function = inspect.unwrap(value) if callable(value) else None
        code = getattr(function, "__code__", None)
        if code is not None and name in called and name != "finalize_model_grads" and FLATTEN in _names(code):
            found.append((code.co_firstlineno, name))
    return [name for _, name in sorted(found)]


def finalize_site() -> str | None:
    """The innermost function of the finalize module on the current stack (who made the tensor being allocated, or
    ran the collective being recorded)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__") == FINALIZE_MODULE:
            return frame.f_code.co_name
        frame = frame.f_back
    return None


class SiteTracker(AllocationTracker):
    """An :class:`AllocationTracker` that also keeps, per function of the finalize module, the largest tensor made
    while it was on the stack."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        super().__init__(device)
        self.sites: dict[str, int] = {}

    def _note(self, tensor: torch.Tensor, inputs: set[int], func: Any) -> int | None:
        nbytes = super()._note(tensor, inputs, func)
        site = finalize_site() if nbytes is not None else None
        if site is not None:
            self.sites[site] = max(self.sites.get(site, 0), nbytes)
        return nbytes


def finding(configuration: str, version: str, steps: list[StepMemory]) -> str:
    """One line for the whole step of one configuration, from every rank's view (the largest figures)."""
    upstream = max(step.upstream_peak_bytes for step in steps)
    subject = max(step.subject_peak_bytes for step in steps)
    unbounded: dict[str, int] = {}
    for step in steps:
        for name, nbytes in step.unbounded().items():
            unbounded[name] = max(unbounded.get(name, 0), nbytes)
    idle = [name for name in steps[0].not_exercised() if all(name in step.not_exercised() for step in steps)]
    line = (
        f"megatron-core {version}, real step ({configuration}): peak {upstream} bytes under upstream, {subject} with "
        "the subject; "
    )
    if unbounded:
        listed = ", ".join(f"{name} ({nbytes} bytes in one buffer)" for name, nbytes in unbounded.items())
        line += f"coalesced reductions the subject does not bound: {listed}"
    else:
        line += "every coalesced reduction that ran is bounded by the subject"
    if idle:
        line += f"; not exercised here, and not replaced by the subject: {', '.join(idle)}"
    return line
