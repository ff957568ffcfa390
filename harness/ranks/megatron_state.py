"""Megatron state inside a rank process: model-parallel groups per case shape, upstream pinned before any subject
code, and facts read off upstream.

Each case runs under its own tensor-parallel size; the groups are created for the case and destroyed after it, so
the next case on the same long-lived rank starts from a clean ``parallel_state``.

Upstream is pinned once per rank process, when the rank starts and before any task runs (so before any subject is
imported): :func:`pin_upstream`, called by the rank pool. A subject that re-binds upstream at import, swaps its
``__code__`` or leaves its replacement behind after ``uninstall()`` would otherwise make the comparison read the
subject's own function as "upstream"; :func:`upstream_changes` names each of these against the pin.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import linecache
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

from harness.targets.megatron_names import ALIAS_NAME, FINALIZE_MODULE, UPSTREAM_NAME


def finalize_module() -> ModuleType:
    """The module (not the re-exported function of the same name)."""
    return importlib.import_module(FINALIZE_MODULE)


_other_groups: dict[str, Any] = {}
_meshes: dict[str, Any] = {}


def initialize_task(rank: int, world_size: int, tensor_parallel: int) -> None:
    """Rank-side: (re)create Megatron's model-parallel groups with the given TP size, and beside them TP-sized
    groups that are not parallel_state's (ranks ``j, j + world/TP, ...``), where the world has room for them."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    _destroy_other_groups()
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tensor_parallel)
    stride = world_size // tensor_parallel
    if stride > 1:
        for start in range(stride):
            ranks = list(range(start, world_size, stride))
            group = dist.new_group(ranks)  # every rank takes part in making every group
            if rank in ranks:
                _other_groups["tp"] = group


def other_tp_group() -> Any:
    """This rank's TP-sized group that is not parallel_state's TP group; the case shape must have one."""
    if "tp" not in _other_groups:
        raise RuntimeError("this case shape has no TP group besides parallel_state's (world size equals TP size)")
    return _other_groups["tp"]


def data_parallel_mesh(device_type: str) -> Any:
    """A device mesh over this rank's data-parallel group, made once per case shape: where Megatron-FSDP shards a
    grad (a ``DTensor`` whose local shard the TP all-reduce reduces)."""
    if device_type not in _meshes:
        from megatron.core import parallel_state
        from torch.distributed.device_mesh import DeviceMesh

        _meshes[device_type] = DeviceMesh.from_group(parallel_state.get_data_parallel_group(), device_type)
    return _meshes[device_type]


def _destroy_other_groups() -> None:
    import torch.distributed as dist

    _meshes.clear()
    group = _other_groups.pop("tp", None)
    if group is not None:
        dist.destroy_process_group(group)


def destroy_task(rank: int, world_size: int) -> None:
    """Rank-side: tear Megatron's model-parallel groups (and the other TP groups) down."""
    from megatron.core import parallel_state

    _destroy_other_groups()
    parallel_state.destroy_model_parallel()


def require_tensor_parallel(tensor_parallel: int) -> None:
    """Rank-side guard: a task written for one case shape must not run under another."""
    from megatron.core import parallel_state

    initialized = parallel_state.model_parallel_is_initialized()
    size = parallel_state.get_tensor_model_parallel_world_size() if initialized else 0
    if size != tensor_parallel:
        raise RuntimeError(f"task expects TP size {tensor_parallel}, the rank has {size or 'no model parallel state'}")


@contextlib.contextmanager
def model_parallel(pool: Any, tensor_parallel: int) -> Iterator[Any]:
    """Megatron's model-parallel groups with TP size ``tensor_parallel`` on every rank of ``pool`` for one case.

    Creating the groups costs dozens of rendezvous, so a case shape sets them up once for all its examples rather
    than per example; they are destroyed when the case ends, also on failure. A pool that a failed example restarted
    makes them again before its next task (``state_tasks``).
    """
    pool.run(initialize_task, tensor_parallel)
    pool.state_tasks.append((initialize_task, (tensor_parallel,)))
    try:
        yield pool
    finally:
        pool.state_tasks.remove((initialize_task, (tensor_parallel,)))
        if pool.running:
            pool.run(destroy_task)


@dataclass(frozen=True)
class PinnedFunction:
    """One of upstream's names as the rank found it at start: the object and copies of what can be swapped in place."""

    name: str
    function: Any
    code: CodeType | None
    defaults: tuple[Any, ...] | None
    kwdefaults: dict[str, Any] | None


@dataclass(frozen=True)
class UpstreamPin:
    """Upstream's all-reduce (and its alias where the install has it), pinned before any subject code ran.

    ``problems`` holds what was already wrong at pin time: upstream's code living outside the installed ``megatron``
    package (``megatron_dirs``), which means something replaced it before the rank started.
    """

    functions: tuple[PinnedFunction, ...]
    megatron_dirs: tuple[str, ...]
    problems: tuple[str, ...]
    when: str

    @property
    def upstream(self) -> Any:
        """The pinned ``_allreduce_non_tensor_model_parallel_grads``: what upstream's side of a comparison calls."""
        return self._upstream().function

    @property
    def upstream_code(self) -> CodeType:
        """A copy of its ``__code__`` as pinned (the object itself may have been swapped since)."""
        return self._upstream().code

    def _upstream(self) -> PinnedFunction:
        for pinned in self.functions:
            if pinned.name == UPSTREAM_NAME:
                return pinned
        raise RuntimeError("; ".join(self.problems) or f"{UPSTREAM_NAME} was not pinned")


_pin: UpstreamPin | None = None
_MISSING = object()


def pin_upstream(when: str = "at rank start") -> UpstreamPin | None:
    """Pin upstream in this process, once; None where Megatron is not installed (the harness's own venv).

    The rank pool calls this first thing in every rank, before ``rank_setup`` and before any task: in a rank forked
    from the fork server (which preloaded Megatron) it costs microseconds, in a spawned rank it imports Megatron.
    Never raises: what is wrong is kept in ``problems`` and reported by every case that reads the pin.
    """
    global _pin
    if _pin is not None:
        return _pin
    try:
        spec = importlib.util.find_spec("megatron")
        if spec is None:
            return None
        dirs = tuple(str(Path(d).resolve()) for d in (spec.submodule_search_locations or ()))
        module = finalize_module()
    except Exception as err:  # reported by the case that reads the pin, never at rank start
        _pin = UpstreamPin((), (), (f"cannot pin upstream: {type(err).__name__}: {err}",), when)
        return _pin
    functions, problems = [], []
    for name in (UPSTREAM_NAME, ALIAS_NAME):
        function = getattr(module, name, None)
        code = getattr(function, "__code__", None)
        if not isinstance(code, CodeType):
            if name == UPSTREAM_NAME:
                problems.append(f"{FINALIZE_MODULE} has no function {UPSTREAM_NAME} to pin (found {function!r})")
            continue
        kwdefaults = None if function.__kwdefaults__ is None else dict(function.__kwdefaults__)
        functions.append(PinnedFunction(name, function, code, function.__defaults__, kwdefaults))
        if not _module_name(function).startswith("megatron"):
            problems.append(
                f"upstream `{name}` was replaced before the gate started the rank (by `{_module_name(function)}`)"
            )
        elif not _under(code.co_filename, dirs):
            problems.append(
                f"upstream `{name}` was replaced before the gate started the rank: its `__code__` lives outside the "
                f"installed megatron package {list(dirs)} (in `{code.co_filename}`)"
            )
    _pin = UpstreamPin(tuple(functions), dirs, tuple(problems), when)
    return _pin


def pinned_upstream() -> UpstreamPin:
    """The pin this rank took at start; pinned now where the process was not started by the rank pool.

    Only a pin taken at rank start is taken before subject code; ``when`` says which one this is.
    """
    pin = _pin if _pin is not None else pin_upstream(when="at first use (not a rank-pool process)")
    if pin is None:
        raise RuntimeError("megatron is not installed in this interpreter: there is no upstream to pin")
    return pin


def upstream_changes(
    pin: UpstreamPin, when: str = "before the case ran", expected: dict[str, PinnedFunction] | None = None
) -> list[str]:
    """What differs between the module's bindings of upstream's names and the pin (or ``expected``), one line each.

    By default each name must be bound to its pinned object, with the pinned ``__code__``, ``__defaults__`` and
    ``__kwdefaults__``, and the problems found at pin time come first. ``expected`` is what :func:`bindings` returned
    earlier (before ``install()``, say): each name must be bound as it was then, in the same state.
    """
    module = finalize_module()
    problems = list(pin.problems) if expected is None else []
    for pinned in pin.functions:
        want = pinned if expected is None else expected.get(pinned.name)
        found = getattr(module, pinned.name, _MISSING)
        if found is _MISSING:
            if want is not None:
                problems.append(f"upstream `{pinned.name}` was removed from {FINALIZE_MODULE} {when}")
        elif want is None or found is not want.function:
            problems.append(f"upstream `{pinned.name}` was replaced {when} (by {_describe(found, pin.megatron_dirs)})")
        else:
            problems += _in_place_changes(want, when)
    return problems


def bindings(pin: UpstreamPin) -> dict[str, PinnedFunction]:
    """What the module binds to upstream's pinned names now, in the state :func:`upstream_changes` compares."""
    module = finalize_module()
    return {p.name: _state(p.name, getattr(module, p.name)) for p in pin.functions if hasattr(module, p.name)}


def _state(name: str, value: Any) -> PinnedFunction:
    kwdefaults = getattr(value, "__kwdefaults__", None)
    return PinnedFunction(
        name,
        value,
        getattr(value, "__code__", None),
        getattr(value, "__defaults__", None),
        None if kwdefaults is None else dict(kwdefaults),
    )


@contextlib.contextmanager
def upstream_bound(pin: UpstreamPin) -> Iterator[None]:
    """Upstream's names bound to their pinned objects for a block, then to whatever was bound before.

    For upstream's side of a run that goes through ``finalize_model_grads``, which looks the name up at call time:
    it must reach upstream even when a subject re-bound the name at import.
    """
    module = finalize_module()
    before = bindings(pin)
    for pinned in pin.functions:
        setattr(module, pinned.name, pinned.function)
    try:
        yield
    finally:
        for pinned in pin.functions:
            if pinned.name in before:
                setattr(module, pinned.name, before[pinned.name].function)
            else:
                delattr(module, pinned.name)


def _in_place_changes(pinned: PinnedFunction, when: str) -> list[str]:
    function = pinned.function
    what = f"upstream `{pinned.name}` was replaced {when}"
    if pinned.code is None:
        return []
    if function.__code__ is not pinned.code:
        return [f"{what}: its `__code__` was swapped (now from `{function.__code__.co_filename}`)"]
    if function.__defaults__ is not pinned.defaults:
        return [f"{what}: its `__defaults__` were swapped ({pinned.defaults!r} -> {function.__defaults__!r})"]
    kwdefaults = function.__kwdefaults__
    if (kwdefaults is None) != (pinned.kwdefaults is None) or (kwdefaults or {}) != (pinned.kwdefaults or {}):
        return [f"{what}: its `__kwdefaults__` changed ({pinned.kwdefaults!r} -> {kwdefaults!r})"]
    return []


def _describe(value: object, megatron_dirs: tuple[str, ...]) -> str:
    """The object's module in backticks; for a function that claims a Megatron module (``functools.wraps`` copies
    ``__module__``) but whose code lives outside the installed package, also the file its code is from."""
    module = _module_name(value)
    code = getattr(value, "__code__", None)
    if module.startswith("megatron") and isinstance(code, CodeType) and not _under(code.co_filename, megatron_dirs):
        return f"`{module}`, its code from `{code.co_filename}`"
    return f"`{module}`"


def _module_name(value: object) -> str:
    name = getattr(value, "__module__", None)
    return name if isinstance(name, str) else type(value).__module__


def _under(filename: str, dirs: tuple[str, ...]) -> bool:
    path = Path(filename).resolve()
    return any(path.is_relative_to(d) for d in dirs)


def upstream_fsdp_flag() -> str:
    """The ``ddp_config`` attribute the installed upstream all-reduce reads, taken from its source.

    Reading it from upstream's own code (rather than from the config dataclass, which on some versions carries both
    the old and the new name) is what lets the equivalence case catch a subject that reads the stale name. The code
    is the pinned one, so a subject that swapped upstream's ``__code__`` does not choose the flag.
    """
    code = pinned_upstream().upstream_code
    if code not in _fsdp_flags:
        # The block at the code's first line, as ``inspect.getsource`` finds it, without the module lookup it makes
        # first (a walk over every loaded module, some 40 ms in each rank process).
        source = "".join(inspect.getblock(linecache.getlines(code.co_filename)[code.co_firstlineno - 1 :]))
        flags = sorted(set(re.findall(r"ddp_config\.(\w+)", source)))
        if len(flags) != 1:
            raise RuntimeError(
                f"{FINALIZE_MODULE}.{UPSTREAM_NAME} reads {flags or 'no'} ddp_config flags; expected one"
            )
        _fsdp_flags[code] = flags[0]
    return _fsdp_flags[code]


_fsdp_flags: dict[CodeType, str] = {}
"""The flag read from each pinned code: every equivalence example asks, and reading the source costs milliseconds
(a Megatron mutant imported again in a forked session brings code of its own, read once in turn)."""


GTP_REMAT_GROUP_GETTER = "get_gtp_weight_remat_group"


def has_gtp_remat() -> bool:
    """Whether this Megatron has a GTP weight-remat axis (0.19 on), whose replicated grads ``finalize_model_grads``
    reduces in one more coalesced buffer when the axis has more than one rank."""
    from megatron.core import parallel_state

    return hasattr(parallel_state, GTP_REMAT_GROUP_GETTER)


@contextlib.contextmanager
def gtp_remat_group_is(group: Any) -> Iterator[None]:
    """Rank-side: parallel_state answers ``group`` for the GTP weight-remat group, then its own getter again.

    A real GTP run shards weights with gathers this CPU path cannot take; the reduction ``finalize_model_grads``
    makes over that axis reads only the group, so giving it a two-rank group runs that reduction on the real step.
    """
    from megatron.core import parallel_state

    original = getattr(parallel_state, GTP_REMAT_GROUP_GETTER)
    setattr(parallel_state, GTP_REMAT_GROUP_GETTER, lambda check_initialized=True: group)
    try:
        yield
    finally:
        setattr(parallel_state, GTP_REMAT_GROUP_GETTER, original)
