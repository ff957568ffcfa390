"""Upstream vs subject ``finalize_model_grads`` on a real GPTModel step, inside real rank processes.

The fake-module comparison (:mod:`harness.contracts.equivalence`) calls the all-reduce directly; this task runs it the
way training does, through ``finalize_model_grads`` on a model Megatron built, so it also catches a subject whose
``install()`` leaves upstream in place or binds a replacement ``finalize_model_grads`` never calls.
"""

from __future__ import annotations

import contextlib
import resource
from typing import Any

import torch

from harness.contracts.collectives import CollectiveRecorder
from harness.contracts.equivalence import bits, not_restored, subject_once, tp_group
from harness.contracts.rank_report import RankReport
from harness.contracts.step_memory import SiteTracker, StepMemory, coalesced_reductions
from harness.ranks import megatron_state as megatron_ranks
from harness.ranks import placement
from harness.subjects.loading import SubjectRef
from harness.targets.megatron_names import UPSTREAM_NAME


class _CallCounter:
    """Counts the calls ``finalize_model_grads`` makes to whatever ``install()`` bound in upstream's place.

    Counting calls, rather than comparing the number of collectives with upstream's, keeps the check true when
    upstream itself reduces in several buffers. ``upstream`` is the pinned object: a name still bound to it was not
    replaced, whatever the subject did at import.
    """

    def __init__(self, module: Any, upstream: Any) -> None:
        self.module = module
        self.upstream = upstream
        self.calls = 0
        self.replaced_upstream = False

    def __enter__(self) -> _CallCounter:
        installed = getattr(self.module, UPSTREAM_NAME)
        self._installed = installed
        self.replaced_upstream = installed is not self.upstream

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return installed(*args, **kwargs)

        setattr(self.module, UPSTREAM_NAME, counting)
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self.module, UPSTREAM_NAME, self._installed)


def gpt_finalize_task(
    rank: int,
    world_size: int,
    subject_ref: SubjectRef,
    budget: int,
    qk_layernorm: bool,
    gtp_remat: bool = False,
) -> RankReport:
    """``finalize_model_grads`` on a real GPTModel step, upstream vs subject installed; bitwise comparison per param.

    Both runs build the same model from the same seed and take the same step, so any difference comes from the
    all-reduce. The subject must also really have run: ``install()`` must have bound its replacement in upstream's
    place, and ``finalize_model_grads`` must have called it. Both steps' memory is measured too (``report.step``,
    :mod:`harness.contracts.step_memory`): the step's peaks, and what each coalesced reduction allocated. With
    ``gtp_remat`` both steps run with a two-rank GTP weight-remat group (``megatron_state.gtp_remat_group_is``).
    """
    from harness.ranks import cpu_gpt

    report = RankReport(rank=rank)
    pin = megatron_ranks.pinned_upstream()
    subject = subject_once(subject_ref)
    report.problems += [f"rank {rank}: {p}" for p in megatron_ranks.upstream_changes(pin)]
    megatron_ranks.require_tensor_parallel(world_size)
    module = megatron_ranks.finalize_module()
    step = report.step = StepMemory(reductions=coalesced_reductions(module))
    device = placement.rank_device()
    with cpu_gpt.device_workarounds(device):
        group = tp_group()

        def finalize(model: Any) -> None:
            # Only the step's reduction reads the GTP group: the forward pass must not see it (it would GTP-gather).
            with megatron_ranks.gtp_remat_group_is(group) if gtp_remat else contextlib.nullcontext():
                cpu_gpt.finalize(model)

        model, _ = cpu_gpt.build_gpt(qk_layernorm=qk_layernorm, seed=11, device=device)
        cpu_gpt.forward_backward(model, seed=5)
        # finalize_model_grads looks upstream's name up at call time: bind the pinned object for upstream's run.
        with megatron_ranks.upstream_bound(pin), CollectiveRecorder(group) as upstream_recorder:
            with SiteTracker(device) as upstream_tracker:
                finalize(model)
        expected = cpu_gpt.main_grads(model)
        model, _ = cpu_gpt.build_gpt(qk_layernorm=qk_layernorm, seed=11, device=device)
        cpu_gpt.forward_backward(model, seed=5)
        bound_before_install = megatron_ranks.bindings(pin)
        before_install = {name: getattr(module, name) for name in step.reductions}
        subject.install(budget_bytes=budget)
        try:
            step.replaced = [name for name in step.reductions if getattr(module, name) is not before_install[name]]
            with CollectiveRecorder(group) as recorder, _CallCounter(module, pin.upstream) as counter:
                with SiteTracker(device) as subject_tracker:
                    finalize(model)
        finally:
            subject.uninstall()
            report.problems += not_restored(rank, pin, bound_before_install)
        got = cpu_gpt.main_grads(model)
    step.upstream_peak_bytes, step.upstream_sites = upstream_tracker.summary().peak_bytes, upstream_tracker.sites
    step.subject_peak_bytes, step.subject_sites = subject_tracker.summary().peak_bytes, subject_tracker.sites
    report.collectives, report.upstream_collectives = recorder.calls, upstream_recorder.calls
    if not counter.replaced_upstream or counter.calls == 0:
        what = "was never called" if counter.replaced_upstream else "left upstream in place"
        report.problems.append(
            f"rank {rank}: with the subject installed finalize_model_grads ran, but the replacement of "
            f"{UPSTREAM_NAME} {what}: the chunked all-reduce did not run"
        )
    for name, value in expected.items():
        if not torch.equal(bits(got[name]), bits(value)):
            diff = (got[name].double() - value.double()).abs().max().item()
            report.problems.append(f"rank {rank}: param {name}: main_grad differs from upstream, max |diff| {diff:.3g}")
    report.peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return report
