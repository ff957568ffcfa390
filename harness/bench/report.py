"""The bench's Markdown table and PNG plot, from ``bench.json`` (and ``gate.json`` when the gate was timed).

The goals are the figures of an existing downstream chunked patch, measured on 2 gloo ranks with 512 MiB of fp32
grads in 64 tensors: they are reported against, never asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

_MIB = 1 << 20
_GOAL_WORLD_SIZE = 2
_GOAL_POPULATION_MIB = 512
_GOAL_TENSORS = 64
# Budget in MiB -> the downstream patch's time as a fraction of upstream's.
_GOAL_RATIOS = {16: 0.63, 64: 0.77, 256: 0.79, 1024: 1.00}
_GOAL_GATE_S = 30.0
_UPSTREAM = "upstream"
_FLOORS = ("floor in place", "floor flat")


def _ratio_rows(samples: list[dict[str, Any]]) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Samples grouped by (world size, population bytes, tensors), with upstream's under ``_UPSTREAM``."""
    groups: dict[tuple[int, int, int], dict[str, Any]] = {}
    for sample in samples:
        key = (sample["world_size"], sample["population_bytes"], sample["tensors"])
        groups.setdefault(key, {})[sample["method"]] = sample
    return groups


def _ratio(group: dict[str, Any], method: str) -> float:
    """The method's median time as a fraction of upstream's in the same group."""
    return group[method]["median_s"] / group[_UPSTREAM]["median_s"]


def _mib(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / _MIB:.0f}" if value >= _MIB else f"{value / _MIB:.2f}"


def _floor_s(group: dict[str, Any]) -> float | None:
    """The faster floor's median time; ``None`` for a document from before the floor was measured."""
    times = [group[f]["median_s"] for f in _FLOORS if f in group]
    return min(times) if times else None


def goal_rows(document: dict[str, Any]) -> list[tuple[int, float | None, float, bool | None]]:
    """Per goal budget: the measured ratio (None when that budget or population was not run), the goal, met."""
    groups = _ratio_rows(document["samples"])
    group = groups.get((_GOAL_WORLD_SIZE, _GOAL_POPULATION_MIB * _MIB, _GOAL_TENSORS))
    rows = []
    for budget, goal in _GOAL_RATIOS.items():
        method = f"budget {budget} MiB"
        if group is None or method not in group:
            rows.append((budget, None, goal, None))
        else:
            measured = _ratio(group, method)
            rows.append((budget, measured, goal, measured <= goal))
    return rows


def _render_markdown(document: dict[str, Any], gate: dict[str, Any] | None, command: str) -> str:
    plan = document["plan"]
    versions = document["versions"]
    lines = [
        "# Bench: the subject's chunked all-reduce against upstream's, a field-style patch and the floor",
        "",
        f"`{command}`; torch {versions['torch']}, megatron-core {versions['megatron-core']}, subject "
        f"`{plan['subject']}`; {_where(plan, versions)}; fp32 grads split evenly into "
        f"{' or '.join(map(str, plan['tensors']))} tensors (views of one buffer); median of {plan['repeats']} "
        "repeats (after one warm-up, which also measures the tensor bytes allocated), every method interleaved in a "
        "rotating order; bench wall time "
        f"{document['wall_time_s']:.0f} s.",
        "",
        "Methods: `upstream` (one coalesced buffer per op); `budget <b> MiB`, the subject; `field <b> MiB`, a "
        "field-style chunked patch (greedy chunks, a fresh flattened buffer per chunk, reduced and copied back one "
        "after the other); the floor, the collectives alone with no copy: `floor in place` (each grad reduced where "
        "it lies, two in flight) and `floor flat` (the one buffer the grads are views of, in one collective).",
        "",
        f"## Against the goals ({_GOAL_WORLD_SIZE} ranks, {_GOAL_POPULATION_MIB} MiB of grads in "
        f"{_GOAL_TENSORS} tensors)",
        "",
        "| budget | subject / upstream time | goal | met |",
        "|---:|---:|---:|:---:|",
    ]
    for budget, measured, goal, met in goal_rows(document):
        shown = "not run" if measured is None else f"{measured:.2f}x"
        verdict = "n/a" if met is None else ("yes" if met else "**no**")
        lines.append(f"| {budget} MiB | {shown} | ≤ {goal:.2f}x | {verdict} |")
    lines += ["", *_summary_table(document)]
    lines += [
        "",
        "## Every measurement",
        "",
        "Largest buffer: the largest all-reduced tensor. Peak allocated: the most bytes of tensors the method held "
        "at once (largest over ranks). Peak extra RSS: the largest rise of a rank's resident set during the call, "
        "over all ranks and repeats.",
        "",
        "| ranks | grads MiB | tensors | method | median s | x upstream | x floor | collectives | largest buffer MiB "
        "| peak allocated MiB | peak extra RSS MiB |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (world_size, population, tensors), group in sorted(_ratio_rows(document["samples"]).items()):
        floor = _floor_s(group)
        for method, sample in group.items():
            to_floor = "-" if floor is None else f"{sample['median_s'] / floor:.2f}"
            lines.append(
                f"| {world_size} | {_mib(population)} | {tensors} | {method} | {sample['median_s']:.3f} | "
                f"{_ratio(group, method):.2f} | {to_floor} | {sample['collectives']} | "
                f"{_mib(sample['largest_buffer_bytes'])} | {_mib(sample.get('peak_allocated_bytes'))} | "
                f"{_mib(sample['peak_extra_rss_bytes'])} |"
            )
    overhead = document["pool_overhead"]
    if overhead is None:
        return "\n".join([*lines, ""])
    lines += [
        "",
        "## The gate's own costs",
        "",
        "| what | measured |",
        "|---|---:|",
    ]
    if gate is not None:
        met = "met" if gate["wall_s"] <= _GOAL_GATE_S else "**not met**"
        lines.append(
            f"| warm `{gate['command']}` (hypothesis profile `{gate['profile']}`) | {gate['wall_s']:.0f} s "
            f"(goal ≤ {_GOAL_GATE_S:.0f} s: {met}) |"
        )
    world = overhead["world_size"]
    lines += [
        f"| a case on fresh ranks ({world} forked from the preloaded fork server, process group and model-parallel "
        "groups built; median, so the server's own start once per process is left out) | "
        f"{overhead['spawn_per_case_s']:.1f} s |",
        f"| a case on the warm rank pool (model-parallel groups built and destroyed) | "
        f"{overhead['pool_per_case_s'] * 1000:.0f} ms |",
        f"| one task round trip on the warm pool | {overhead['pool_per_task_s'] * 1000:.2f} ms |",
        *(
            f"| one all-reduce of 64 fp32 on {size} warm gloo ranks (every collective a subject makes pays it) | "
            f"{seconds * 1000:.2f} ms |"
            for size, seconds in overhead.get("small_allreduce_s", {}).items()
        ),
        "",
    ]
    return "\n".join(lines)


def _where(plan: dict[str, Any], versions: dict[str, str]) -> str:
    """The placement the grads were reduced under, and the GPU where there was one."""
    placement = plan.get("placement", "gloo")
    if placement == "gloo":
        return "gloo on CPU grads"
    gpu = versions.get("gpu", "GPU unknown")
    return f"placement {placement} on CUDA grads ({gpu}); peak allocated is the CUDA allocator's"


def _summary_table(document: dict[str, Any]) -> list[str]:
    """One row per (ranks, grads, tensors): upstream's median and the floor's, then per budget the subject's and the
    field-style patch's time as fractions of upstream's, and the peak bytes each allocated."""
    budgets = document["plan"]["budgets_mib"]
    header = " | ".join(f"{b} MiB" for b in budgets)
    lines = [
        "## Summary: time / upstream's time, subject | field-style (peak allocated MiB, subject | field-style)",
        "",
        f"| ranks | grads MiB | tensors | upstream s (peak allocated MiB) | floor / upstream | {header} |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(budgets),
    ]
    for (world_size, population, tensors), group in sorted(_ratio_rows(document["samples"]).items()):
        upstream = group[_UPSTREAM]
        floor = _floor_s(group)
        to_floor = "-" if floor is None else f"{floor / upstream['median_s']:.2f}"
        cells = [_budget_cell(group, b) for b in budgets]
        lines.append(
            f"| {world_size} | {_mib(population)} | {tensors} | {upstream['median_s']:.3f} "
            f"({_mib(upstream.get('peak_allocated_bytes'))}) | {to_floor} | " + " | ".join(cells) + " |"
        )
    return lines


def _budget_cell(group: dict[str, Any], budget_mib: int) -> str:
    subject, field = group.get(f"budget {budget_mib} MiB"), group.get(f"field {budget_mib} MiB")
    if subject is None:
        return "not run"
    times = f"{_ratio(group, f'budget {budget_mib} MiB'):.2f}"
    memory = _mib(subject.get("peak_allocated_bytes"))
    if field is not None:
        times += f" \\| {_ratio(group, f'field {budget_mib} MiB'):.2f}"
        memory += f" \\| {_mib(field.get('peak_allocated_bytes'))}"
    return f"{times} ({memory})"


def _memory_bytes(sample: dict[str, Any]) -> int:
    """The memory a plot shows for a sample: its peak extra RSS on CPU grads, its allocator peak on CUDA grads."""
    rss = sample["peak_extra_rss_bytes"]
    return sample["peak_allocated_bytes"] if rss is None else rss


def _plot(document: dict[str, Any], path: Path) -> None:
    """Per world size (columns): time ratio and peak extra RSS (rows) against the budget.

    Colour is the amount of grads, solid lines the goals' 64-tensor shape, dotted the many-small-tensor shape; in the
    time row thin dashed lines with crosses are the field-style patch and dotted horizontal lines the floor; in the
    memory row dashed horizontal lines are upstream's peak.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted(_ratio_rows(document["samples"]).items())
    world_sizes = sorted({world for (world, _, _), _ in groups})
    populations = sorted({population for (_, population, _), _ in groups})
    figure, axes = plt.subplots(2, len(world_sizes), figsize=(6.5 * len(world_sizes), 8), squeeze=False)
    goals = sorted(_GOAL_RATIOS.items())
    for column, world_size in enumerate(world_sizes):
        times, memory = axes[0][column], axes[1][column]
        for (world, population, tensors), group in groups:
            if world != world_size:
                continue
            budgets = sorted((s["budget_bytes"] / _MIB, m) for m, s in group.items() if m.startswith("budget "))
            x = [b for b, _ in budgets]
            color = f"C{populations.index(population) % 10}"
            style = "o-" if tensors == _GOAL_TENSORS else "s:"
            label = f"{_mib(population)} MiB in {tensors}"
            times.plot(x, [_ratio(group, m) for _, m in budgets], style, color=color, label=label)
            fields = [(b, f"field {b:g} MiB") for b in x if f"field {b:g} MiB" in group]
            if fields:
                ratios = [_ratio(group, m) for _, m in fields]
                times.plot([b for b, _ in fields], ratios, "x--", color=color, linewidth=0.8, alpha=0.7)
            floor = _floor_s(group)
            if floor is not None:
                times.axhline(floor / group[_UPSTREAM]["median_s"], color=color, linestyle=":", linewidth=0.8)
            peaks = [_memory_bytes(group[m]) / _MIB for _, m in budgets]
            memory.plot(x, peaks, style, color=color, label=label)
            memory.axhline(_memory_bytes(group[_UPSTREAM]) / _MIB, color=color, linestyle="--", linewidth=0.8)
        if world_size == _GOAL_WORLD_SIZE:
            goal_label = f"goal ({_GOAL_POPULATION_MIB} MiB in {_GOAL_TENSORS})"
            times.plot([b for b, _ in goals], [g for _, g in goals], "k*", markersize=10, label=goal_label)
        times.axhline(1.0, color="grey", linewidth=0.8)
        placement = document["plan"].get("placement", "gloo")
        times.set(xscale="log", ylabel="time / upstream's", title=f"{world_size} ranks, {placement}: time vs upstream")
        memory.set_yscale("symlog", linthresh=1)
        memory.set_ylim(bottom=0)
        measure = "peak extra RSS" if placement == "gloo" else "peak CUDA allocated"
        memory.set(xscale="log", xlabel="budget (MiB)", ylabel=f"{measure} (MiB)", title="peak memory")
        for axis in (times, memory):
            axis.set_xticks([b for b, _ in goals], [str(b) for b, _ in goals])
            axis.grid(True, which="both", alpha=0.3)
        times.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write(directory: Path, command: str) -> tuple[Path, Path]:
    """``bench.md`` and ``bench.png`` next to ``bench.json`` (and ``gate.json``) in ``directory``."""
    document = json.loads((directory / "bench.json").read_text())
    gate_file = directory / "gate.json"
    gate = json.loads(gate_file.read_text()) if gate_file.exists() else None
    markdown, image = directory / "bench.md", directory / "bench.png"
    markdown.write_text(_render_markdown(document, gate, command))
    _plot(document, image)
    return markdown, image


if __name__ == "__main__":
    written = write(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "nox -s bench")
    print("wrote " + " and ".join(map(str, written)))
