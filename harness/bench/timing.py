"""Benchmark of the subject's chunked all-reduce against upstream's, a field-style chunked patch and the floor (the
collectives alone; :mod:`harness.bench.variants`), on real gloo ranks, plus the gate's overheads.

All run side by side in the same rank processes, on the same grads, interleaved repeat by repeat, so drift of a
shared machine hits them alike. Per run each rank records wall time (between two barriers), the collectives it made
and its peak RSS above the level before the call (the kernel's high-water mark is reset first, ``clear_refs``). The
warm-up run of each variant, whose time is not kept, also measures the peak of live tensor bytes it allocated (the
equivalence family's ``AllocationTracker``), so the tracking costs no timed run anything.
Run in a target's venv: ``python -m harness.bench.timing --out reports/bench`` (``nox -s bench`` does this).

``--placement cuda`` is the CUDA mode (``nox -s gpu`` runs it): the grads live on the GPU, the ranks reduce over NCCL
where every rank has a GPU and over gloo sharing the GPUs otherwise (:mod:`harness.ranks.placement`), each call is
timed between device synchronisations, and the memory figure is the warm-up's peak in the caching allocator's terms
(RSS says nothing about device memory). A population that would not fit three times over on a GPU (the grads,
upstream's flattened copy, the chunks) is left out, with a line saying so.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import itertools
import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.bench import variants
from harness.formats.environment import REFERENCE_SUBJECT
from harness.formats.progress import Progress
from harness.ranks import megatron_state as megatron_ranks
from harness.ranks import placement as placements
from harness.ranks.pool import RankPool
from harness.subjects.loading import SubjectRef, resolve_subject
from harness.targets.megatron_names import UPSTREAM_NAME

_MIB = 1 << 20
_DEFAULT_WORLD_SIZES = (2, 4)
_DEFAULT_POPULATIONS_MIB = (64, 256, 512, 1024)
_DEFAULT_BUDGETS_MIB = (16, 64, 256, 1024)
# 64 tensors: the goals' shape, every grad large enough to be reduced in place; 4096: small grads, packed in chunks.
_DEFAULT_TENSORS = (64, 4096)
_DEFAULT_REPEATS = 5
_UPSTREAM = "upstream"
# A 1 GiB all-reduce on four ranks sharing two cores takes tens of seconds; the pool's default would cut it short.
_TASK_TIMEOUT_S = 1800.0


@dataclass
class _Sample:
    """One method on one population: every repeat's wall time, and what the collectives and memory looked like."""

    world_size: int
    population_bytes: int
    tensors: int
    method: str
    budget_bytes: int | None
    seconds: list[float] = field(default_factory=list)
    collectives: int = 0
    largest_buffer_bytes: int = 0
    peak_extra_rss_bytes: int | None = 0
    """The largest rise of a rank's resident set during the call; ``None`` on CUDA grads."""
    peak_allocated_bytes: int = 0

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)


# --- rank side ------------------------------------------------------------------------------------------------------

_model: list[Any] = []
_flat: list[Any] = []
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 1 << 20


def _map_large_allocations() -> None:
    """Serve every allocation from 1 MiB up by its own mapping, returned to the kernel when freed.

    glibc otherwise raises its mmap threshold (up to 32 MiB) after the first large free and serves later buffers from
    a heap whose freed pages stay resident, so a chunk buffer could reuse pages an earlier call left behind and never
    show in the RSS rise. Upstream and subject run under the same setting.
    """
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES) != 1:
        raise RuntimeError("mallopt(M_MMAP_THRESHOLD) failed: peak RSS figures would not be comparable")


def _status_kib(field_name: str) -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field_name}:\s+(\d+) kB", status, re.MULTILINE).group(1))


_FITS_TIMES = 3
"""A CUDA population is run only where its GPU has room for this many copies per rank sharing it."""


def _allocate_task(rank: int, world_size: int, population_bytes: int, tensors: int) -> int | None:
    """Build one model chunk of ``tensors`` fp32 sequence-parallel params holding ``population_bytes`` of main_grad,
    each a view of one contiguous buffer, as Megatron's grad buffer holds them (and the flat floor reduces), on the
    rank's device. ``None`` where a GPU has no room for it (see ``_FITS_TIMES``)."""
    import torch

    _map_large_allocations()
    _free_task(rank, world_size)
    device = torch.device(placements.rank_device())
    if device.type == "cuda":
        sharing = -(-world_size // torch.cuda.device_count())
        free, _ = torch.cuda.mem_get_info(device)
        fits = torch.tensor([int(free >= population_bytes * _FITS_TIMES * sharing)], device=device)
        torch.distributed.all_reduce(fits, op=torch.distributed.ReduceOp.MIN)
        if not fits.item():
            return None
    chunk = torch.nn.Module()
    chunk.ddp_config = SimpleNamespace(**{megatron_ranks.upstream_fsdp_flag(): False})
    numel = population_bytes // tensors // 4
    flat = torch.full((numel * tensors,), float(rank + 1), device=device)
    for index in range(tensors):
        param = torch.nn.Parameter(torch.empty(0))
        param.sequence_parallel = True
        param.main_grad = flat[index * numel : (index + 1) * numel]
        chunk.register_parameter(f"p{index}", param)
    _model.append(chunk)
    _flat.append(flat)
    return _status_kib("VmRSS")


def _free_task(rank: int, world_size: int) -> None:
    import torch

    _model.clear()
    _flat.clear()
    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _variant_call(method: str, budget_bytes: int | None, subject_ref: SubjectRef) -> tuple[Callable[..., None], Any]:
    """What one method calls on ``(model, config)``, and the subject to uninstall after it (or ``None``)."""
    from harness.contracts.equivalence import subject_once, tp_group

    grads = [param.main_grad for param in _model[0].parameters()]
    if method == _UPSTREAM:
        return getattr(megatron_ranks.finalize_module(), UPSTREAM_NAME), None
    if method == variants.FLOOR_IN_PLACE:
        return lambda model, config: variants.floor_in_place(grads, tp_group()), None
    if method == variants.FLOOR_FLAT:
        return lambda model, config: variants.floor_flat(_flat[0], tp_group()), None
    if method.startswith(variants.FIELD_PREFIX):
        assert budget_bytes is not None
        return lambda model, config: variants.field_style(grads, tp_group(), budget_bytes), None
    subject = subject_once(subject_ref)
    subject.install(budget_bytes=budget_bytes)
    return subject.allreduce_non_tensor_model_parallel_grads, subject


def _time_task(
    rank: int, world_size: int, method: str, budget_bytes: int | None, subject_ref: SubjectRef, track: bool = False
) -> dict:
    """One timed call of a method on the allocated chunk; with ``track``, also the peak of tensor bytes it held."""
    import torch

    from harness.contracts.allocations import AllocationTracker
    from harness.contracts.collectives import CollectiveRecorder
    from harness.contracts.equivalence import tp_group

    config = SimpleNamespace(sequence_parallel=True, qk_layernorm=False)
    _flat[0].fill_(float(rank + 1))
    device = _flat[0].device
    on_cuda = device.type == "cuda"
    call, subject = _variant_call(method, budget_bytes, subject_ref)
    tracker = AllocationTracker(device) if track else contextlib.nullcontext()
    try:
        Path("/proc/self/clear_refs").write_text("5")
        before = _status_kib("VmRSS")
        with CollectiveRecorder(tp_group()) as recorder:
            _synchronize(device)
            torch.distributed.barrier()
            started = time.perf_counter()
            with tracker:
                call(_model, config)
                _synchronize(device)
            torch.distributed.barrier()
            seconds = time.perf_counter() - started
        peak = _status_kib("VmHWM")
    finally:
        if subject is not None:
            subject.uninstall()
    return {
        "seconds": seconds,
        "collectives": len(recorder.calls),
        "largest_buffer_bytes": max((size for _, size, _ in recorder.calls), default=0),
        "peak_extra_rss_bytes": None if on_cuda else max(0, peak - before) * 1024,
        "peak_allocated_bytes": tracker.summary().peak_bytes if isinstance(tracker, AllocationTracker) else None,
    }


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- main side ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _BenchPlan:
    """What to measure; the defaults cover the goals in the README."""

    world_sizes: tuple[int, ...] = _DEFAULT_WORLD_SIZES
    populations_mib: tuple[int, ...] = _DEFAULT_POPULATIONS_MIB
    budgets_mib: tuple[int, ...] = _DEFAULT_BUDGETS_MIB
    tensors: tuple[int, ...] = _DEFAULT_TENSORS
    repeats: int = _DEFAULT_REPEATS
    subject: str = REFERENCE_SUBJECT
    placement: str = "gloo"
    """The placement every world size runs under (resolved for the machine: ``cuda`` is NCCL or ``cuda-gloo``)."""

    def methods(self) -> list[tuple[str, int | None]]:
        """Upstream, the floor twice, then per budget the subject (``budget <b> MiB``) and the field-style patch."""
        return [
            (_UPSTREAM, None),
            (variants.FLOOR_IN_PLACE, None),
            (variants.FLOOR_FLAT, None),
            *((f"budget {b} MiB", b * _MIB) for b in self.budgets_mib),
            *((f"{variants.FIELD_PREFIX} {b} MiB", b * _MIB) for b in self.budgets_mib),
        ]


def _measure_allreduce(plan: _BenchPlan, progress: Callable[..., object] = print) -> list[_Sample]:
    """Every method on every population and world size; one warm-up round per population is not recorded."""
    samples: list[_Sample] = []
    subject = resolve_subject(plan.subject)
    machine = placements.this_machine()
    steps = Progress(len(plan.world_sizes) * len(plan.populations_mib) * len(plan.tensors))
    for world_size in plan.world_sizes:
        placement = placements.resolve(plan.placement, world_size, machine).name
        pool = RankPool(world_size, placement, timeout_s=_TASK_TIMEOUT_S)
        try:
            with megatron_ranks.model_parallel(pool, world_size):
                for population_mib, tensors in itertools.product(plan.populations_mib, plan.tensors):
                    population = population_mib * _MIB
                    if None in pool.run(_allocate_task, population, tensors):
                        progress(
                            f"{steps.advance()} world {world_size}, {population_mib} MiB: does not fit the GPU, "
                            "left out",
                            flush=True,
                        )
                        continue
                    rows = {m: _Sample(world_size, population, tensors, m, b) for m, b in plan.methods()}
                    methods = plan.methods()
                    for repeat in range(plan.repeats + 1):
                        # Each repeat starts one method later, so no method always runs right after the same one.
                        shift = repeat % len(methods)
                        for method, budget in methods[shift:] + methods[:shift]:
                            results = pool.run(_time_task, method, budget, subject, repeat == 0)
                            row = rows[method]
                            if repeat == 0:
                                row.peak_allocated_bytes = max(r["peak_allocated_bytes"] for r in results)
                                continue
                            row.seconds.append(max(r["seconds"] for r in results))
                            row.collectives = results[0]["collectives"]
                            row.largest_buffer_bytes = max(r["largest_buffer_bytes"] for r in results)
                            rss = [r["peak_extra_rss_bytes"] for r in results]
                            row.peak_extra_rss_bytes = None if None in rss else max(row.peak_extra_rss_bytes, *rss)
                    pool.run(_free_task)
                    samples.extend(rows.values())
                    upstream = rows[_UPSTREAM].median_s
                    progress(
                        f"{steps.advance()} world {world_size}, {population_mib} MiB in {tensors} tensors: "
                        f"upstream {upstream:.3f} s; "
                        + ", ".join(f"{m} {r.median_s / upstream:.2f}x" for m, r in rows.items() if m != _UPSTREAM),
                        flush=True,
                    )
        finally:
            pool.close()
    return samples


def _init_only_task(rank: int, world_size: int) -> None:
    megatron_ranks.initialize_task(rank, world_size, world_size)
    megatron_ranks.destroy_task(rank, world_size)


def _noop_task(rank: int, world_size: int) -> None:
    return None


def _small_allreduces_task(rank: int, world_size: int, count: int) -> float:
    """Seconds per all-reduce of 64 fp32 over the whole world, ``count`` in a row between two barriers."""
    import torch
    import torch.distributed as dist

    tensor = torch.ones(64)
    dist.barrier()
    started = time.perf_counter()
    for _ in range(count):
        dist.all_reduce(tensor)
    dist.barrier()
    return (time.perf_counter() - started) / count


def _measure_small_allreduce(world_sizes: tuple[int, ...] = (2, 4), count: int = 500) -> dict[str, float]:
    """What one collective costs on this machine's gloo ranks, whatever it carries: the floor under a subject that
    reduces in many small pieces (every such piece pays it once). Keyed by world size."""
    latency = {}
    for world_size in world_sizes:
        pool = RankPool(world_size, "gloo")
        try:
            pool.run(_small_allreduces_task, count // 10)
            latency[str(world_size)] = max(pool.run(_small_allreduces_task, count))
        finally:
            pool.close()
    return latency


def _measure_pool_overhead(world_size: int = 2, repeats: int = 3, tasks: int = 200) -> dict[str, float]:
    """What a case pays for its ranks: a fresh pool per case (spawn, import, rendezvous, model-parallel groups) vs a
    warm pool (model-parallel groups per case, then a task round trip)."""
    spawn = []
    for _ in range(repeats):
        started = time.perf_counter()
        pool = RankPool(world_size, "gloo")
        try:
            pool.run(_init_only_task)
        finally:
            pool.close()
        spawn.append(time.perf_counter() - started)
    pool = RankPool(world_size, "gloo")
    try:
        pool.run(_init_only_task)
        per_case = []
        for _ in range(repeats):
            started = time.perf_counter()
            pool.run(_init_only_task)
            per_case.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(tasks):
            pool.run(_noop_task)
        per_task = (time.perf_counter() - started) / tasks
    finally:
        pool.close()
    return {
        "world_size": world_size,
        "spawn_per_case_s": statistics.median(spawn),
        "pool_per_case_s": statistics.median(per_case),
        "pool_per_task_s": per_task,
        "small_allreduce_s": _measure_small_allreduce(),
    }


def _parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness.bench.timing", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for bench.json")
    parser.add_argument("--world-sizes", type=int, nargs="+", default=list(_DEFAULT_WORLD_SIZES))
    parser.add_argument("--populations-mib", type=int, nargs="+", default=list(_DEFAULT_POPULATIONS_MIB))
    parser.add_argument("--budgets-mib", type=int, nargs="+", default=list(_DEFAULT_BUDGETS_MIB))
    parser.add_argument("--tensors", type=int, nargs="+", default=list(_DEFAULT_TENSORS))
    parser.add_argument("--repeats", type=int, default=_DEFAULT_REPEATS)
    parser.add_argument("--subject", default=REFERENCE_SUBJECT)
    parser.add_argument(
        "--placement",
        default="gloo",
        choices=[*placements.PLACEMENTS, placements.CUDA],
        help="gloo on CPU grads (default), or CUDA grads: cuda (NCCL where every rank has a GPU, else cuda-gloo)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> Path:
    """Measure and write ``bench.json`` (samples, pool overhead, versions) under ``--out``; a placement this machine
    cannot run ends it at once, saying what it found."""
    options = _parse_arguments(argv)
    plan = _BenchPlan(
        tuple(options.world_sizes),
        tuple(options.populations_mib),
        tuple(options.budgets_mib),
        tuple(options.tensors),
        options.repeats,
        options.subject,
        options.placement,
    )
    machine = placements.this_machine()
    refused = [r for w in plan.world_sizes if (r := placements.skip_reason(plan.placement, w, machine))]
    if refused:
        raise SystemExit(f"python -m harness.bench.timing: {refused[0]}")
    import megatron.core
    import torch

    started = time.perf_counter()
    samples = _measure_allreduce(plan)
    on_cuda = plan.placement != "gloo"
    overhead = None if on_cuda else _measure_pool_overhead()
    options.out.mkdir(parents=True, exist_ok=True)
    versions = {"torch": torch.__version__, "megatron-core": megatron.core.__version__}
    if on_cuda:
        versions["gpu"] = f"{machine.gpus} x {torch.cuda.get_device_name(0)}"
    document = {
        "plan": asdict(plan),
        "versions": versions,
        "samples": [{**asdict(s), "median_s": s.median_s} for s in samples],
        "pool_overhead": overhead,
        "wall_time_s": time.perf_counter() - started,
    }
    path = options.out / "bench.json"
    path.write_text(json.dumps(document, indent=2) + "\n")
    return path


if __name__ == "__main__":
    print(f"wrote {main()}")
