"""A method swapped on the built instances of a Megatron class (``forward`` of every ``TransformerLayer``), checked
on the real step: Megatron reaches such a method through ``nn.Module.__call__``, which no reading of the source
resolves, so the patch is applied to a real GPTModel (TP 2 + sequence parallel) and the step is taken.

Mandatory, per rank: after apply, each instance of the class holds the replacement as an attribute of its own; the
step's forward and backward run (a replacement returning what Megatron's caller does not unpack raises there, and
the red names the Megatron line); Megatron's call reaches the replacement on every instance; after undo, each
instance's own attributes and the class's namespace are what they were.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from harness.contracts.api_fingerprint.patch_effects import namespace_changes, owner_of, restore, snapshot
from harness.contracts.equivalence import subject_once
from harness.contracts.rank_report import RankReport
from harness.ranks import megatron_state as megatron_ranks
from harness.ranks import placement
from harness.subjects.loading import SubjectRef
from harness.subjects.upstream_state import upstream_restored

_MISSING = object()


def instance_patch_task(rank: int, world_size: int, subject_ref: SubjectRef) -> RankReport:
    """Rank-side body: apply the subject's patch to a built GPT, take a step, undo it; problems per rank."""
    from harness.ranks import cpu_gpt

    report = RankReport(rank=rank)
    subject = subject_once(subject_ref)
    megatron_ranks.require_tensor_parallel(world_size)
    symbols = list(subject.REPLACED_ON_INSTANCES)
    device = placement.rank_device()
    with cpu_gpt.device_workarounds(device):
        model, _ = cpu_gpt.build_gpt(seed=11, device=device)
        swapped = {symbol: _instances(model, symbol) for symbol in symbols}
        before = {
            (id(m), _attribute(symbol)): vars(m).get(_attribute(symbol), _MISSING)
            for symbol, mods in swapped.items()
            for _, m in mods
        }
        classes = snapshot(owner_of(symbol)[0] for symbol in symbols)
        problems = [f"{symbol}: the built GPT has no instance of its class" for symbol, m in swapped.items() if not m]
        counts: dict[int, int] = {}
        with upstream_restored():  # what the apply binds beside the declared owners (ms-swift: torch's too)
            try:
                subject.apply_replacements(model=model)
                problems += _unbound(swapped)
                if not problems:
                    problems += _step(cpu_gpt, model, swapped, counts) or _unreached(swapped, counts)
                if subject.undo_replacements is not None:
                    subject.undo_replacements(model=model)
                    problems += _changed(swapped, before) + [f"after undo, {c}" for c in namespace_changes(classes)]
            except Exception as err:
                problems.append(f"the declared apply or undo raised {type(err).__name__}: {err}")
            finally:
                restore(classes)
                for symbol, mods in swapped.items():
                    for _, module in mods:
                        _put_back(module, _attribute(symbol), before[(id(module), _attribute(symbol))])
    report.problems += [f"rank {rank}: {p}" for p in problems]
    return report


def _instances(model: Any, symbol: str) -> list[tuple[str, Any]]:
    owner, _ = owner_of(symbol)
    return [(name, module) for name, module in model.named_modules() if isinstance(module, owner)]


def _unbound(swapped: dict[str, list[tuple[str, Any]]]) -> list[str]:
    problems = []
    for symbol, modules in swapped.items():
        attribute = _attribute(symbol)
        left = [name for name, module in modules if attribute not in vars(module)]
        if left:
            problems.append(f"{symbol}: after apply, {len(left)} instance(s) still use the class's ({left[0]}, ...)")
    return problems


def _step(cpu_gpt: Any, model: Any, swapped: dict[str, list[tuple[str, Any]]], counts: dict[int, int]) -> list[str]:
    """Forward and backward with a counter around each instance's replacement, taken away again after."""
    shims: list[tuple[Any, str, Any]] = []
    for symbol, modules in swapped.items():
        attribute = _attribute(symbol)
        for _, module in modules:
            replacement = vars(module)[attribute]
            shims.append((module, attribute, replacement))
            setattr(module, attribute, _counting(replacement, id(module), counts))
    try:
        cpu_gpt.forward_backward(model, seed=5)
    except Exception as err:
        return [f"the step with the patch applied raised {type(err).__name__}: {err} ({_megatron_line(err)})"]
    finally:
        for module, attribute, replacement in shims:
            setattr(module, attribute, replacement)
    return []


def _counting(replacement: Callable[..., Any], key: int, counts: dict[int, int]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[key] = counts.get(key, 0) + 1
        return replacement(*args, **kwargs)

    return counted


def _unreached(swapped: dict[str, list[tuple[str, Any]]], counts: dict[int, int]) -> list[str]:
    problems = []
    for symbol, modules in swapped.items():
        missed = [name for name, module in modules if not counts.get(id(module))]
        if missed:
            problems.append(
                f"{symbol}: Megatron's step never reached the replacement on {len(missed)} instance(s) ({missed[0]}, "
                "...)"
            )
    return problems


def _attribute(symbol: str) -> str:
    return symbol.rpartition(".")[2]


def _changed(swapped: dict[str, list[tuple[str, Any]]], before: dict[tuple[int, str], Any]) -> list[str]:
    """The instances whose own attribute of the swapped name undo did not put back (the step may change others)."""
    problems = []
    for symbol, modules in swapped.items():
        attribute = _attribute(symbol)
        for name, module in modules:
            then, now = before[(id(module), attribute)], vars(module).get(attribute, _MISSING)
            if now is not then:
                how = "left in place" if then is _MISSING else "removed" if now is _MISSING else "re-bound"
                problems.append(f"after undo, {symbol}: instance {name}: its own {attribute!r} {how}")
    return problems


def _put_back(module: Any, attribute: str, value: Any) -> None:
    if value is _MISSING:
        vars(module).pop(attribute, None)
    else:
        vars(module)[attribute] = value


def _megatron_line(err: BaseException) -> str:
    """The innermost frame of Megatron's own code the error passed through, as ``megatron/...py:line``."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/megatron/" in f.filename]
    if not frames:
        return "raised outside Megatron's code"
    frame = frames[-1]
    return f"at megatron/{frame.filename.split('/megatron/', 1)[1]}:{frame.lineno}, in {frame.name}"
