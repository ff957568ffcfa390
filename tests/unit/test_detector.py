"""The side-effect detector, driven through isolated loads of fixture packages that each seed one known effect."""

from __future__ import annotations

import _thread
import atexit
import collections
import dataclasses
import gc
import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.contracts.import_side_effects.callable_state import (
    CallableState,
    callable_state_changes,
    capture_callable_state,
)
from harness.contracts.import_side_effects.detector import (
    KINDS,
    SideEffect,
    SideEffectDetector,
    allowance_for,
    detect,
    detect_with_allowances,
    format_effects,
)
from harness.contracts.import_side_effects.fake_modules import build_fakes
from harness.contracts.import_side_effects.isolation import load_isolated

FIXTURES = Path(__file__).resolve().parent.parent / "import_fixtures"
MEGATRON_FAKES = {
    "megatron.core.distributed.finalize_model_grads": {
        "_allreduce_layernorm_grads": "function",
        "finalize_model_grads": "function",
    },
}


@pytest.fixture(autouse=True)
def _hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test in an empty working directory, without bytecode files appearing next to the fixtures."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


@pytest.fixture
def level_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("conformance.probe.level")
    logger.setLevel(logging.NOTSET)
    yield logger
    logger.setLevel(logging.NOTSET)


def _absent_env(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make ``name`` unset for the test, and unset again afterwards whatever the test wrote."""
    monkeypatch.setenv(name, "placeholder")
    monkeypatch.delenv(name)


def _load_detecting(fixture: str, fakes: Any = None, **options: Any) -> tuple[ModuleType | None, list[SideEffect]]:
    loaded: list[ModuleType] = []
    effects = detect(lambda: loaded.append(load_isolated(FIXTURES / fixture, fakes)), **options)
    return (loaded[0] if loaded else None), effects


def _pairs(effects: list[SideEffect]) -> set[tuple[str, str]]:
    return {(effect.kind, effect.name) for effect in effects}


def _setup_patches_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    return {"fakes": build_fakes(MEGATRON_FAKES)}


def _setup_patches_class(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    watched = ModuleType("conformance_watched")

    class Layer:
        def forward(self) -> str:
            return "original"

    Layer.__module__ = "conformance_watched"
    watched.Layer = Layer
    monkeypatch.setitem(sys.modules, "conformance_watched", watched)
    return {"watch_modules": ["conformance_watched"]}


def _setup_reads_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    monkeypatch.delenv("CONFORMANCE_PROBE_READ_FLAG", raising=False)
    return {}


def _setup_writes_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    _absent_env(monkeypatch, "CONFORMANCE_PROBE_WRITTEN")
    return {}


def _setup_logs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    monkeypatch.setattr(logging.getLogger("conformance.probe.quiet"), "propagate", False)
    return {}


def _setup_sys_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    monkeypatch.setattr(sys, "path", list(sys.path))
    return {}


def _setup_imports_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    deps = tmp_path / "deps"
    deps.mkdir()
    (deps / "conformance_probe_dependency.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(deps))
    return {}


def _setup_inits_cuda(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """A stand-in torch whose ``cuda.init()`` flips ``cuda.is_initialized()``, as the real one does."""
    state = {"initialized": False}
    torch, cuda = ModuleType("torch"), ModuleType("torch.cuda")
    cuda.is_initialized = lambda: state["initialized"]
    cuda.init = lambda: state.update(initialized=True)
    torch.cuda = cuda
    monkeypatch.setitem(sys.modules, "torch", torch)
    return {}


def _no_setup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    return {}


SEEDED: list[tuple[str, Callable[[pytest.MonkeyPatch, Path], dict[str, Any]], set[tuple[str, str]]]] = [
    (
        "patches_module",
        _setup_patches_module,
        {("module-attribute", "megatron.core.distributed.finalize_model_grads._allreduce_layernorm_grads")},
    ),
    ("patches_class", _setup_patches_class, {("class-attribute", "conformance_watched.Layer.forward")}),
    ("imports_module", _setup_imports_module, {("sys-modules", "conformance_probe_dependency")}),
    ("inserts_sys_path", _setup_sys_path, {("sys-path", "sys.path")}),
    ("logs", _setup_logs, {("log-record", "conformance.probe.logs"), ("log-record", "conformance.probe.quiet")}),
    ("sets_logger_level", _no_setup, {("logger-config", "conformance.probe.level")}),
    ("warns", _no_setup, {("warning", "DeprecationWarning")}),
    ("reads_env", _setup_reads_env, {("env-read", "CONFORMANCE_PROBE_READ_FLAG")}),
    ("writes_env", _setup_writes_env, {("env-write", "CONFORMANCE_PROBE_WRITTEN")}),
    ("starts_thread", _no_setup, {("thread", "conformance-probe-worker")}),
    ("starts_process", _no_setup, {("process", Path(sys.executable).name)}),
    ("inits_cuda", _setup_inits_cuda, {("cuda-init", "torch.cuda")}),
    ("creates_file", _no_setup, {("file", "adapter.lock")}),
]


def _stop_worker(module: ModuleType | None) -> None:
    if module is not None and hasattr(module, "STOP"):
        module.STOP.set()
        module.WORKER.join(timeout=5)


@pytest.mark.usefixtures("level_logger")
@pytest.mark.parametrize(("fixture", "setup", "expected"), SEEDED, ids=[case[0] for case in SEEDED])
def test_seeded_side_effect_is_named(
    fixture: str,
    setup: Callable[[pytest.MonkeyPatch, Path], dict[str, Any]],
    expected: set[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    options = setup(monkeypatch, tmp_path)
    fakes = options.pop("fakes", None)
    module, effects = _load_detecting(fixture, fakes, **options)
    try:
        assert _pairs(effects) == expected, format_effects(effects)
    finally:
        _stop_worker(module)


@pytest.mark.filterwarnings("ignore:this adapter API is deprecated:DeprecationWarning")
@pytest.mark.usefixtures("level_logger")
@pytest.mark.parametrize(("fixture", "setup", "expected"), SEEDED, ids=[case[0] for case in SEEDED])
def test_allowing_the_names_moves_them_to_allowed(
    fixture: str,
    setup: Callable[[pytest.MonkeyPatch, Path], dict[str, Any]],
    expected: set[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    options = setup(monkeypatch, tmp_path)
    fakes = options.pop("fakes", None)
    (kind,) = {kind for kind, _ in expected}
    allow = {kind: [name for _, name in expected]}
    loaded: list[ModuleType] = []
    effects, allowed = detect_with_allowances(
        lambda: loaded.append(load_isolated(FIXTURES / fixture, fakes)), allow=allow, **options
    )
    _stop_worker(loaded[0] if loaded else None)
    assert effects == [], format_effects(effects)
    assert _pairs(allowed) == expected, format_effects(allowed)


def test_allow_suppresses_exactly_the_allowed_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_PROBE_NOISY_LEVEL", raising=False)
    _, everything = _load_detecting("noisy")
    _, without_logs = _load_detecting("noisy", allow={"log-record": ["conformance.probe.*"]})
    assert _pairs(everything) == {
        ("env-read", "CONFORMANCE_PROBE_NOISY_LEVEL"),
        ("log-record", "conformance.probe.noisy"),
        ("warning", "UserWarning"),
    }, format_effects(everything)
    assert _pairs(without_logs) == _pairs(everything) - {("log-record", "conformance.probe.noisy")}


@pytest.mark.parametrize("fixture", ["clean", "relative_pkg", "single_module.py"])
def test_clean_code_reports_nothing(fixture: str) -> None:
    _, effects = _load_detecting(fixture)
    assert effects == [], format_effects(effects)


def test_details_say_what_happened(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fakes = build_fakes(MEGATRON_FAKES)
    _, (patch,) = _load_detecting("patches_module", fakes)
    assert patch.detail.startswith(
        "re-bound: <function megatron.core.distributed.finalize_model_grads._allreduce_layernorm_grads> -> <function _"
    ), patch.detail
    assert str(patch) == f"module-attribute {patch.name}: {patch.detail}"

    _setup_imports_module(monkeypatch, tmp_path)
    _, (imported,) = _load_detecting("imports_module")
    assert "removed again" in imported.detail
    assert "conformance_probe_dependency" not in sys.modules

    module, (thread,) = _load_detecting("starts_thread")
    _stop_worker(module)
    assert thread.detail.startswith("started, still running (daemon)"), thread.detail

    _, (process,) = _load_detecting("starts_process")
    assert f"{sys.executable} -c pass" in process.detail
    assert "exited" in process.detail


def test_allowed_imports_and_own_prefix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _setup_imports_module(monkeypatch, tmp_path)
    assert _load_detecting("imports_module", allowed_imports=["conformance_probe_dependency"])[1] == []
    name = "conformance_probe_dependency"
    try:
        assert detect(lambda: importlib.import_module(name), own_prefix=name) == []
        del sys.modules[name]
        (effect,) = detect(lambda: importlib.import_module(name))
    finally:
        sys.modules.pop(name, None)
    assert (effect.kind, effect.name) == ("sys-modules", name)
    assert effect.detail.startswith("imported: <module conformance_probe_dependency>")


def test_every_way_of_reading_the_environment_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_PROBE_SUBSCRIPT", "1")
    for name in ("GETENV", "GET", "CONTAINS", "GETENVB"):
        monkeypatch.delenv(f"CONFORMANCE_PROBE_{name}", raising=False)

    def read() -> None:
        os.getenv("CONFORMANCE_PROBE_GETENV")
        os.environ.get("CONFORMANCE_PROBE_GET")
        assert os.environ["CONFORMANCE_PROBE_SUBSCRIPT"] == "1"
        assert "CONFORMANCE_PROBE_CONTAINS" not in os.environ
        os.getenvb(b"CONFORMANCE_PROBE_GETENVB")

    effects = detect(read)
    first = read.__code__.co_firstlineno
    here = "tests/unit/test_detector.py"
    assert {(effect.name, effect.detail) for effect in effects} == {
        ("CONFORMANCE_PROBE_GETENV", f"read (unset) at {here}:{first + 1}"),
        ("CONFORMANCE_PROBE_GET", f"read (unset) at {here}:{first + 2}"),
        ("CONFORMANCE_PROBE_SUBSCRIPT", f"read (set) at {here}:{first + 3}"),
        ("CONFORMANCE_PROBE_CONTAINS", f"read (unset) at {here}:{first + 4}"),
        ("CONFORMANCE_PROBE_GETENVB", f"read (unset) at {here}:{first + 5}"),
    }
    assert {effect.kind for effect in effects} == {"env-read"}
    (enumerated,) = [effect for effect in detect(lambda: dict(os.environ)) if effect.name == "*"]
    assert enumerated.detail.startswith(f"the whole environment was enumerated at {here}:")


def test_a_read_names_the_module_file_and_line_that_made_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded read of ``reads_env``, line 5 of its ``__init__``, is still reported, and named by its file below
    the ``sys.path`` entry that holds it: the module that reads the variable."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    _setup_reads_env(monkeypatch, FIXTURES)
    _, (effect,) = _load_detecting("reads_env")
    assert effect.detail == "read (unset) at reads_env/__init__.py:5", effect.detail
    assert str(effect) == "env-read CONFORMANCE_PROBE_READ_FLAG: read (unset) at reads_env/__init__.py:5"


def test_environment_writes_changes_and_deletions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_PROBE_CHANGED", "old")
    monkeypatch.setenv("CONFORMANCE_PROBE_DELETED", "gone soon")
    _absent_env(monkeypatch, "CONFORMANCE_PROBE_SET")

    def write() -> None:
        os.environ["CONFORMANCE_PROBE_CHANGED"] = "new"
        del os.environ["CONFORMANCE_PROBE_DELETED"]
        os.environ["CONFORMANCE_PROBE_SET"] = "1"

    effects = detect(write)
    assert {(effect.kind, effect.name, effect.detail) for effect in effects} == {
        ("env-write", "CONFORMANCE_PROBE_CHANGED", "changed"),
        ("env-write", "CONFORMANCE_PROBE_DELETED", "deleted"),
        ("env-write", "CONFORMANCE_PROBE_SET", "set"),
    }
    assert "new" not in format_effects(effects)
    assert os.environ["CONFORMANCE_PROBE_CHANGED"] == "new"


@pytest.mark.parametrize("allow", [{}, {"env-read": ["*"]}])
def test_replacing_os_environ_is_reported_and_undone(allow: dict[str, list[str]]) -> None:
    real = os.environ
    (effect,) = detect(lambda: setattr(os, "environ", {}), allow=allow)
    assert (effect.kind, effect.name) == ("env-write", "os.environ")
    assert os.environ is real


def test_megatron_modules_are_watched_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = ModuleType("megatron.conformance_probe")
    probe.kept, probe.rebound, probe.deleted = 1, object(), object()
    monkeypatch.setitem(sys.modules, "megatron.conformance_probe", probe)

    def patch() -> None:
        probe.rebound = object()
        del probe.deleted
        probe.added = len
        probe.submodule = ModuleType("megatron.conformance_probe.submodule")

    effects = detect(patch)
    details = {effect.name: effect.detail.partition(":")[0] for effect in effects}
    assert details == {
        "megatron.conformance_probe.rebound": "re-bound",
        "megatron.conformance_probe.deleted": "deleted",
        "megatron.conformance_probe.added": "added",
    }, format_effects(effects)
    assert detect(lambda: setattr(probe, "rebound", object()), allow={"module-attribute": ["megatron.*"]}) == []


def test_threads_and_processes_started_below_the_usual_entry_points() -> None:
    finished = threading.Event()
    effects = detect(lambda: _thread.start_new_thread(finished.set, ()))
    assert finished.wait(timeout=5)
    assert _pairs(effects) == {("thread", "_thread.start_new_thread")}
    (effect,) = detect(lambda: os.system(f"{sys.executable} -c pass"))
    assert (effect.kind, effect.name) == ("process", Path(sys.executable).name)
    assert effect.detail.endswith("(exit status 0)")


def test_files_created_modified_and_deleted() -> None:
    Path("kept.txt").write_text("a")
    Path("changed.txt").write_text("a")
    Path("removed.txt").write_text("a")
    Path("__pycache__").mkdir()

    def touch_files() -> None:
        Path("changed.txt").write_text("longer")
        Path("removed.txt").unlink()
        Path("new").mkdir()
        Path("new", "inner.txt").write_text("a")
        Path("__pycache__", "ignored.pyc").write_text("a")

    effects = detect(touch_files)
    assert {(effect.name, effect.detail) for effect in effects} == {
        ("changed.txt", "modified"),
        ("removed.txt", "deleted"),
        ("new", "directory created"),
        ("new/inner.txt", "created"),
    }


def test_import_hooks_are_part_of_sys_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(sys, "path_hooks", list(sys.path_hooks))
    hook = object()
    effects = detect(lambda: (sys.meta_path.insert(0, hook), sys.path_hooks.pop()))
    assert {(effect.name, effect.detail.partition(":")[0]) for effect in effects} == {
        ("sys.meta_path", "added at 0"),
        ("sys.path_hooks", "removed"),
    }


def test_unwatched_modules_are_not_compared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _setup_patches_class(monkeypatch, tmp_path)
    assert _load_detecting("patches_class")[1] == []


def test_logger_configuration_changes(level_logger: logging.Logger) -> None:
    handler = logging.NullHandler()

    def configure() -> None:
        level_logger.addHandler(handler)
        level_logger.propagate = False

    try:
        effects = detect(configure)
    finally:
        level_logger.removeHandler(handler)
        level_logger.propagate = True
    assert {effect.detail for effect in effects} == {
        f"handler added: {handler!r}",
        "propagate: True -> False",
    }, format_effects(effects)
    assert detect(lambda: logging.getLogger("conformance.probe.fresh")) == []


def test_warning_filter_changes_are_reported_and_undone() -> None:
    filters = list(warnings.filters)
    effects = detect(lambda: warnings.filterwarnings("ignore", category=FutureWarning))
    assert _pairs(effects) == {("warning", "warnings.filters")}
    assert "filter added: ignore FutureWarning" in effects[0].detail
    assert warnings.filters == filters


def test_effects_are_kept_when_the_block_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_PROBE_BEFORE_FAILURE", raising=False)
    detector = SideEffectDetector()
    with pytest.raises(RuntimeError, match="adapter failed"), detector:
        os.environ.get("CONFORMANCE_PROBE_BEFORE_FAILURE")
        raise RuntimeError("adapter failed")
    assert _pairs(detector.effects) == {("env-read", "CONFORMANCE_PROBE_BEFORE_FAILURE")}


def _instrumented() -> dict[str, object]:
    return {
        "os.environ": os.environ,
        "os.environb": os.environb,
        "os.fork": os.fork,
        "os.system": os.system,
        "os.posix_spawn": os.posix_spawn,
        "Thread.start": vars(threading.Thread)["start"],
        "_thread.start_new_thread": _thread.start_new_thread,
        "Popen.__init__": vars(subprocess.Popen)["__init__"],
        "Logger.handle": vars(logging.Logger)["handle"],
        "root handlers": list(logging.getLogger().handlers),
        "warnings.showwarning": warnings.showwarning,
        "warnings.filters": list(warnings.filters),
        "atexit.register": atexit.register,
        "sys.gettrace": sys.gettrace(),
        "sys.getprofile": sys.getprofile(),
        "threading.gettrace": threading.gettrace(),
        "threading.getprofile": threading.getprofile(),
        "gc.callbacks": list(gc.callbacks),
    }


def _assert_instrumentation_restored(before: dict[str, object]) -> None:
    after = _instrumented()
    for name, original in before.items():
        if isinstance(original, list):
            assert len(after[name]) == len(original), name
            assert all(a is b for a, b in zip(after[name], original, strict=True)), name
        else:
            assert after[name] is original, name


def test_detector_restores_everything_it_instrumented(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_PROBE_NOISY_LEVEL", raising=False)
    before = _instrumented()
    _load_detecting("noisy")
    _assert_instrumentation_restored(before)
    with pytest.raises(RuntimeError):
        detect(lambda: load_isolated(FIXTURES / "raises", build_fakes({"deep_ep": {}})))
    _assert_instrumentation_restored(before)


def test_a_kept_environ_reference_still_reads_and_writes_the_real_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONFORMANCE_PROBE_KEPT", "1")
    _absent_env(monkeypatch, "CONFORMANCE_PROBE_KEPT_WRITE")
    kept: list[Any] = []
    detect(lambda: kept.append(os.environ))
    (environ,) = kept
    assert environ is not os.environ
    assert environ["CONFORMANCE_PROBE_KEPT"] == "1"
    environ["CONFORMANCE_PROBE_KEPT_WRITE"] = "2"
    assert os.environ["CONFORMANCE_PROBE_KEPT_WRITE"] == "2"
    assert os.getenv("CONFORMANCE_PROBE_KEPT_WRITE") == "2"


def test_unknown_kinds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown side-effect kinds"):
        SideEffectDetector(allow={"env_read": ["*"]})


def test_a_detector_is_used_once() -> None:
    detector = SideEffectDetector()
    with detector:
        pass
    with pytest.raises(RuntimeError, match="only once"), detector:
        pass


def test_format_effects() -> None:
    effects = [SideEffect("env-read", "HOME", "read (set)"), SideEffect("thread", "worker", "started, finished")]
    assert format_effects(effects) == "env-read HOME: read (set)\nthread worker: started, finished"
    assert format_effects([]) == "no side effects"
    assert set(KINDS) >= {effect.kind for effect in effects}


# --- function-state, class-attribute, mutable-global, process-hook -------------------------------------------------


@pytest.fixture
def probe_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A module under ``megatron``, so watched by default, for the tests to seed and patch."""
    module = ModuleType("megatron.conformance_probe")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def _effect_lines(effects: list[SideEffect]) -> set[str]:
    return {str(effect) for effect in effects}


def test_function_code_and_defaults_swapped_in_place(probe_module: ModuleType) -> None:
    def finalize(model: object, num_tokens: object = None, *, scale: int = 1) -> str:
        return "upstream"

    def replacement(model: object, num_tokens: object = None, *, scale: int = 1) -> str:
        return "patched"

    probe_module.finalize = finalize
    code = finalize.__code__

    (swap,) = detect(lambda: setattr(finalize, "__code__", replacement.__code__))
    assert (swap.kind, swap.name) == ("function-state", "megatron.conformance_probe.finalize")
    assert swap.detail.startswith(
        f"__code__ replaced (<code finalize at tests/unit/test_detector.py:{code.co_firstlineno}>"
    )
    assert f"-> <code replacement at tests/unit/test_detector.py:{replacement.__code__.co_firstlineno}>)" in swap.detail
    assert finalize(None) == "patched"  # the detector reports; it does not undo a patch

    (defaults,) = detect(lambda: setattr(finalize, "__defaults__", ("all-reduce",)))
    assert (
        str(defaults)
        == "function-state megatron.conformance_probe.finalize: __defaults__ replaced ((None,) -> ('all-reduce',))"
    )
    (kwdefaults,) = detect(lambda: setattr(finalize, "__kwdefaults__", {"scale": 2}))
    assert kwdefaults.detail == "__kwdefaults__ replaced ({'scale': 1} -> {'scale': 2})"
    (in_place,) = detect(lambda: finalize.__kwdefaults__.update(scale=3))
    assert in_place.detail == "__kwdefaults__ changed in place ({'scale': 2} -> {'scale': 3})"
    assert detect(lambda: setattr(finalize, "__defaults__", ("all-reduce",))) == []  # the same default again


def test_function_state_reaches_methods_of_classes_bound_in_watched_modules(probe_module: ModuleType) -> None:
    class Group:  # defined here, only bound in the watched module (like a torch._C type in torch.distributed)
        def size(self) -> int:
            return 2

        @staticmethod
        def backend() -> str:
            return "nccl"

        @classmethod
        def create(cls) -> Group:
            return cls()

        @property
        def ranks(self) -> list[int]:
            return [0, 1]

    probe_module.Group = Group

    def one() -> int:
        return 1

    def patch() -> None:
        Group.size.__code__ = one.__code__
        vars(Group)["backend"].__func__.__defaults__ = (1,)
        vars(Group)["create"].__func__.__code__ = one.__code__
        vars(Group)["ranks"].fget.__code__ = one.__code__

    effects = detect(patch)
    assert {(effect.kind, effect.name, effect.detail.partition(" (")[0]) for effect in effects} == {
        ("function-state", "megatron.conformance_probe.Group.size", "__code__ replaced"),
        ("function-state", "megatron.conformance_probe.Group.backend", "__defaults__ replaced"),
        ("function-state", "megatron.conformance_probe.Group.create", "__code__ replaced"),
        ("function-state", "megatron.conformance_probe.Group.ranks.fget", "__code__ replaced"),
    }, format_effects(effects)


def test_an_object_bound_twice_is_named_at_its_home(monkeypatch: pytest.MonkeyPatch) -> None:
    alias, home = ModuleType("megatron.conformance_alias"), ModuleType("megatron.conformance_home")

    def finalize() -> None:
        pass

    finalize.__module__, finalize.__qualname__ = home.__name__, "finalize"
    alias.finalize = home.finalize = finalize  # the package attribute that shadows its submodule, seen first
    monkeypatch.setitem(sys.modules, alias.__name__, alias)
    monkeypatch.setitem(sys.modules, home.__name__, home)
    (effect,) = detect(lambda: setattr(finalize, "__code__", (lambda: None).__code__))
    assert effect.name == "megatron.conformance_home.finalize"


def test_attributes_of_classes_bound_in_watched_modules(probe_module: ModuleType) -> None:
    class Buffer:
        def __init__(self) -> None:
            self.size = 0

        def flush(self) -> None:
            pass

    Buffer.__module__ = "deep_ep"  # defined elsewhere, bound in a watched module
    probe_module.Buffer = Buffer
    original_init = Buffer.__init__

    def patch() -> None:
        Buffer.__init__ = lambda self: None  # type: ignore[method-assign]
        del Buffer.flush
        Buffer.extra = 1  # type: ignore[attr-defined]

    effects = detect(patch)
    details = {effect.name: effect.detail for effect in effects}
    assert {effect.kind for effect in effects} == {"class-attribute"}, format_effects(effects)
    assert details == {
        "megatron.conformance_probe.Buffer.__init__": (
            f"re-bound: {_describe_function(original_init)} -> {_describe_function(Buffer.__init__)}"
        ),
        "megatron.conformance_probe.Buffer.flush": details["megatron.conformance_probe.Buffer.flush"],
        "megatron.conformance_probe.Buffer.extra": "added: 1",
    }
    assert details["megatron.conformance_probe.Buffer.flush"].startswith("deleted: <function ")


def _describe_function(function: Any) -> str:
    return f"<function {function.__module__}.{function.__qualname__}>"


def test_dataclass_field_defaults(probe_module: ModuleType) -> None:
    @dataclasses.dataclass
    class Config:
        grad_reduce_in_fp32: bool = False
        buckets: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass
    class DerivedConfig(Config):
        extra: int = 0

    probe_module.Config, probe_module.DerivedConfig = Config, DerivedConfig
    fields = vars(Config)["__dataclass_fields__"]

    def patch() -> None:
        fields["grad_reduce_in_fp32"].default = True
        fields["buckets"].default_factory = dict

    effects = detect(patch)
    assert _effect_lines(effects) == {
        "class-attribute megatron.conformance_probe.Config.grad_reduce_in_fp32: dataclass default False -> True",
        "class-attribute megatron.conformance_probe.Config.buckets: dataclass default_factory <class builtins.list> "
        "-> <class builtins.dict>",
    }, format_effects(effects)  # once per field, under the class that declares it, not under DerivedConfig too


def test_torch_tensor_is_a_watched_class() -> None:
    torch = pytest.importorskip("torch")
    original = vars(torch.Tensor)["backward"]

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, *args, **kwargs)

    try:
        effects = detect(lambda: setattr(torch.Tensor, "backward", backward))
    finally:
        torch.Tensor.backward = original
    assert [(effect.kind, effect.name) for effect in effects] == [("class-attribute", "torch.Tensor.backward")]
    assert effects[0].detail == f"re-bound: <function torch._tensor.Tensor.backward> -> {_describe_function(backward)}"


def test_mutable_globals_changed_in_place(probe_module: ModuleType) -> None:
    probe_module.DEFAULTS = {"tensor_model_parallel": False, "partition_dim": -1, "stride": 1}
    probe_module.SUPPORTED = ["swiglu", "geglu"]
    probe_module.SEEN = {"a"}
    probe_module.BUFFER = bytearray(b"ab")
    probe_module.QUEUE = collections.deque([1])
    probe_module.REBOUND = {"x": 1}
    hook = object()

    def patch() -> None:
        probe_module.DEFAULTS["partition_dim"] = 0
        probe_module.DEFAULTS["added"] = hook
        del probe_module.DEFAULTS["stride"]
        probe_module.SUPPORTED.append("relu")
        probe_module.SEEN.add("b")
        probe_module.BUFFER.extend(b"cd")
        probe_module.QUEUE.appendleft(0)
        probe_module.REBOUND = {"x": 2}  # a re-binding: module-attribute, not mutable-global

    effects = detect(patch)
    by_name = {effect.name: effect for effect in effects}
    assert by_name["megatron.conformance_probe.REBOUND"].kind == "module-attribute"
    changed = {name: effect.detail for name, effect in by_name.items() if effect.kind == "mutable-global"}
    assert changed == {
        "megatron.conformance_probe.DEFAULTS": (
            f"dict changed in place: 3 changes: key 'added' added: {hook!r}; key 'stride' removed (was 1); "
            "key 'partition_dim' re-bound: -1 -> 0"
        ),
        "megatron.conformance_probe.SUPPORTED": "list changed in place: item added at 2: 'relu'",
        "megatron.conformance_probe.SEEN": "set changed in place: item added: 'b'",
        "megatron.conformance_probe.BUFFER": "bytearray changed in place: contents changed (length 2 -> 4)",
        "megatron.conformance_probe.QUEUE": "deque changed in place: item added at 0: 0",
    }, format_effects(effects)


def test_a_container_bound_twice_is_reported_once(probe_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    probe_module.REGISTRY = {}
    other = ModuleType("megatron.conformance_other")
    other.REGISTRY_ALIAS = probe_module.REGISTRY
    monkeypatch.setitem(sys.modules, other.__name__, other)
    (effect,) = detect(lambda: probe_module.REGISTRY.update(x=1))
    assert str(effect) == (
        "mutable-global megatron.conformance_probe.REGISTRY: dict changed in place: key 'x' added: 1 "
        "(also bound as megatron.conformance_other.REGISTRY_ALIAS)"
    )


def test_a_long_in_place_change_is_shortened(probe_module: ModuleType) -> None:
    probe_module.REGISTRY = {}
    (effect,) = detect(lambda: probe_module.REGISTRY.update({f"key{n}": "x" * 500 for n in range(100)}))
    assert effect.detail.startswith("dict changed in place: 100 changes: key 'key0' added: 'xxx")
    assert len(effect.detail) <= 200 and effect.detail.endswith("...")


def test_atexit_registrations() -> None:
    def flush() -> None:
        pass

    register = atexit.register
    try:
        effects = detect(lambda: atexit.register(flush))
    finally:
        atexit.unregister(flush)
    assert _effect_lines(effects) == {f"process-hook atexit: callback registered: {_describe_function(flush)}"}
    assert atexit.register is register


def test_atexit_registration_below_the_entry_point_is_counted() -> None:
    def flush() -> None:
        pass

    try:
        (effect,) = detect(lambda: _register_natively(flush))
    finally:
        atexit.unregister(flush)
    assert (effect.kind, effect.name) == ("process-hook", "atexit")
    assert effect.detail.startswith("1 callback(s) registered below atexit.register (atexit._ncallbacks() ")


def _register_natively(function: Callable[[], None]) -> None:
    """Register through a reference to the C function taken before the detector instrumented ``atexit.register``."""
    _NATIVE_ATEXIT_REGISTER(function)


_NATIVE_ATEXIT_REGISTER = atexit.register


def test_signal_handlers_are_reported_and_put_back() -> None:
    before = signal.getsignal(signal.SIGUSR1)

    def on_usr1(signum: int, frame: object) -> None:
        pass

    (effect,) = detect(lambda: signal.signal(signal.SIGUSR1, on_usr1))
    assert str(effect) == (
        f"process-hook signal.SIGUSR1: handler {getattr(before, 'name', before)} -> {_describe_function(on_usr1)}; "
        "put back"
    )
    assert signal.getsignal(signal.SIGUSR1) is before


@pytest.mark.parametrize("arm", ["setitimer", "alarm"])
def test_a_timer_armed_by_the_block_is_reported_and_disarmed(arm: str) -> None:
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "a timer is armed already"
    block = {
        "setitimer": lambda: signal.setitimer(signal.ITIMER_REAL, 3600),
        "alarm": lambda: signal.alarm(3600),
    }[arm]
    try:
        (effect,) = detect(block)
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert (effect.kind, effect.name) == ("process-hook", "signal.ITIMER_REAL")
    assert effect.detail.startswith("disarmed -> fires in 3") and effect.detail.endswith(" s; disarmed again")


def test_a_timer_the_block_re_armed_is_put_back_near_where_it_was() -> None:
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0), "a timer is armed already"
    previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)
    signal.setitimer(signal.ITIMER_REAL, 1000)
    try:
        (effect,) = detect(lambda: signal.setitimer(signal.ITIMER_REAL, 5000))
        remaining, interval = signal.getitimer(signal.ITIMER_REAL)
        assert detect(lambda: None) == []  # a timer that keeps running down is no change
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert 990 < remaining <= 1000 and interval == 0
    assert (
        effect.detail.startswith("fires in 99")
        and "-> fires in 5000 s; re-armed to about where it was" in effect.detail
    )


def test_trace_and_profile_functions_are_reported_and_put_back() -> None:
    def tracer(frame: object, event: str, arg: object) -> None:
        return None

    before = {"sys.settrace": sys.gettrace(), "sys.setprofile": sys.getprofile()}
    before |= {"threading.settrace": threading.gettrace(), "threading.setprofile": threading.getprofile()}

    def install() -> None:
        sys.setprofile(tracer)
        threading.settrace(tracer)
        threading.setprofile(tracer)
        sys.settrace(tracer)

    effects = detect(install)
    now = {"sys.settrace": sys.gettrace(), "sys.setprofile": sys.getprofile()}
    now |= {"threading.settrace": threading.gettrace(), "threading.setprofile": threading.getprofile()}
    assert now == before
    assert {effect.name: effect.detail for effect in effects} == {
        name: f"{_describe_value(old)} -> {_describe_function(tracer)}; put back" for name, old in before.items()
    }
    assert {effect.kind for effect in effects} == {"process-hook"}


def _describe_value(value: object) -> str:
    return "None" if value is None else _describe_function(value)


def test_gc_callbacks_and_exception_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = ((sys, "excepthook"), (threading, "excepthook"), (sys, "unraisablehook"), (sys, "displayhook"))
    originals = {f"{module.__name__}.{hook}": getattr(module, hook) for module, hook in hooks}
    for module, hook in hooks:
        monkeypatch.setattr(module, hook, getattr(module, hook))  # restored at teardown: the detector only reports

    def on_gc(phase: str, info: dict[str, int]) -> None:
        pass

    def hook(*args: object) -> None:
        pass

    def install() -> None:
        gc.callbacks.append(on_gc)
        for module, name in hooks:
            setattr(module, name, hook)

    try:
        effects = detect(install)
    finally:
        gc.callbacks.remove(on_gc)
    details = {effect.name: effect.detail for effect in effects}
    assert details.keys() == {"gc.callbacks", *originals}, format_effects(effects)
    assert details.pop("gc.callbacks") == f"callback added: {_describe_function(on_gc)}"
    for name, detail in details.items():
        old = originals[name]
        shown = _describe_function(old) if hasattr(old, "__qualname__") else repr(old)[:20]
        assert detail.startswith(shown) and detail.endswith(f" -> {_describe_function(hook)}"), detail
    assert {effect.kind for effect in effects} == {"process-hook"}


def test_the_detector_leaves_hooks_and_timers_as_it_found_them() -> None:
    before = _instrumented()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM)}

    def break_everything() -> None:
        sys.settrace(lambda *args: None)
        threading.setprofile(lambda *args: None)
        signal.signal(signal.SIGUSR2, lambda *args: None)
        signal.setitimer(signal.ITIMER_VIRTUAL, 3600)
        signal.setitimer(signal.ITIMER_PROF, 3600)
        signal.alarm(3600)
        raise RuntimeError("adapter failed")

    detector = SideEffectDetector()
    with pytest.raises(RuntimeError, match="adapter failed"), detector:
        break_everything()
    _assert_instrumentation_restored(before)
    assert {effect.name for effect in detector.effects} == {
        "sys.settrace",
        "threading.setprofile",
        "signal.SIGUSR2",
        "signal.ITIMER_REAL",
        "signal.ITIMER_VIRTUAL",
        "signal.ITIMER_PROF",
    }, format_effects(detector.effects)
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers
    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        assert signal.getitimer(timer) == (0.0, 0.0)


# --- allowances --------------------------------------------------------------------------------------------------


def test_allowances_are_per_name(probe_module: ModuleType) -> None:
    class Buffer:
        def __init__(self) -> None:
            pass

    probe_module.Buffer = Buffer

    def patch() -> None:
        Buffer.__init__ = lambda self: None  # type: ignore[method-assign]
        Buffer.flush = lambda self: None  # type: ignore[attr-defined]

    effects, allowed = detect_with_allowances(
        patch, allow={"class-attribute": ["megatron.conformance_probe.Buffer.__init__"], "env-read": ["SLIME_*"]}
    )
    assert [effect.name for effect in allowed] == ["megatron.conformance_probe.Buffer.__init__"]
    assert [effect.name for effect in effects] == ["megatron.conformance_probe.Buffer.flush"]
    assert allowed[0].kind == "class-attribute"

    detector = SideEffectDetector(allow={"class-attribute": ["*.Buffer.*"]})
    with detector:
        Buffer.__init__ = lambda self: None  # type: ignore[method-assign]
    assert detector.effects == [] and [effect.kind for effect in detector.allowed] == ["class-attribute"]
    # A pattern for another kind does not waive this one.
    assert detect(lambda: setattr(Buffer, "flush", None), allow={"module-attribute": ["*"]}) != []


def test_log_records_are_allowed_by_message(monkeypatch: pytest.MonkeyPatch) -> None:
    """``log-message`` waives a record by its whole message, whatever the logger: the way to allow what a framework
    logs through a logger it shares; another message on the same logger is still reported."""
    logger = logging.getLogger("conformance.probe.shared")

    def log() -> None:
        logger.warning("modernrl: chunked all-reduce ready (%d MiB)", 64)
        logger.warning("someone else's record")

    effects, allowed = detect_with_allowances(log, allow={"log-message": ["modernrl: chunked all-reduce*"]})
    assert [(effect.kind, effect.name, effect.message) for effect in allowed] == [
        ("log-record", "conformance.probe.shared", "modernrl: chunked all-reduce ready (64 MiB)")
    ]
    assert [effect.detail for effect in effects] == ["WARNING: someone else's record"]
    assert allowance_for(allowed[0], {"log-message": ["modernrl: *"]}) == "log-message 'modernrl: *'"
    # A logger-name pattern still wins, and names the waiver as before; a message pattern waives no other kind.
    assert allowance_for(allowed[0], {"log-record": ["conformance.*"], "log-message": ["*"]}) == "conformance.*"
    monkeypatch.delenv("CONFORMANCE_PROBE_MESSAGE", raising=False)
    read = detect(lambda: os.environ.get("CONFORMANCE_PROBE_MESSAGE"), allow={"log-message": ["*"]})
    assert _pairs(read) == {("env-read", "CONFORMANCE_PROBE_MESSAGE")}


def test_a_seeded_log_is_still_red_when_another_message_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    _setup_logs(monkeypatch, FIXTURES)
    _, effects = _load_detecting("logs", allow={"log-message": ["adapter loaded quietly"]})
    assert _pairs(effects) == {("log-record", "conformance.probe.logs")}, format_effects(effects)


def test_allowing_a_kind_alone_is_refused() -> None:
    with pytest.raises(ValueError, match=r"per name.*\{'env-read': \['<name pattern>'\]\}.*SLIME_\*"):
        SideEffectDetector(allow=["env-read"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="per name"):
        detect(lambda: None, allow=("log-record", "warning"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="list of name patterns"):
        SideEffectDetector(allow={"env-read": "SLIME_*"})  # type: ignore[dict-item]
    for nothing in ((), [], {}, None):
        assert SideEffectDetector(allow=nothing).allow == {}  # type: ignore[arg-type]


def test_every_probe_runs_whatever_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_PROBE_ALLOWED", raising=False)
    everything = {kind: ["*"] for kind in KINDS}
    effects, allowed = detect_with_allowances(lambda: os.environ.get("CONFORMANCE_PROBE_ALLOWED"), allow=everything)
    assert effects == [] and _pairs(allowed) == {("env-read", "CONFORMANCE_PROBE_ALLOWED")}


# --- the session-wide snapshot of callables ----------------------------------------------------------------------


@pytest.fixture
def state_modules(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    package, module = ModuleType("conformance_state"), ModuleType("conformance_state.grads")

    def finalize() -> str:
        return "upstream"

    def helper() -> str:
        return "helper"

    class Reducer:
        def reduce(self) -> str:
            return "sum"

    module.finalize, module.helper, module.Reducer, module._GROUP = finalize, helper, Reducer, None
    module.os = os
    package.grads = module
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return package, module


def _again(before: CallableState, since: bool) -> CallableState:
    """A second capture of the probe modules: whole, or taken ``since`` the first, as the session watch takes it."""
    return capture_callable_state(("conformance_state",), since=before if since else None)


@pytest.mark.parametrize("since", [False, True], ids=["full", "since"])
def test_callable_state_sees_code_swaps_and_rebinds_not_data(
    since: bool, state_modules: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, module = state_modules
    before = capture_callable_state(["conformance_state"])
    assert isinstance(before, CallableState)
    assert callable_state_changes(before, _again(before, since)) == []

    def patched() -> str:
        return "patched"

    module.finalize.__code__ = patched.__code__
    module.Reducer.reduce.__defaults__ = (1,)
    module.helper = patched
    module._GROUP = object()  # a data global re-bound, as parallel_state does: not compared
    module.added = len
    del module.os
    late = ModuleType("conformance_state.late")  # imported after the first capture: not compared
    late.f = patched
    monkeypatch.setitem(sys.modules, late.__name__, late)

    changes = callable_state_changes(before, _again(before, since))
    lines = {(change.kind, change.name, change.detail.partition(":")[0].partition(" (")[0]) for change in changes}
    assert lines == {
        ("function-state", "conformance_state.grads.finalize", "__code__ replaced"),
        ("function-state", "conformance_state.grads.Reducer.reduce", "__defaults__ replaced"),
        ("module-attribute", "conformance_state.grads.helper", "re-bound"),
        ("module-attribute", "conformance_state.grads.added", "added"),
        ("module-attribute", "conformance_state.grads.os", "deleted"),
    }, format_effects(changes)
    assert [change.kind for change in changes][:3] == ["module-attribute"] * 3  # bindings first, then functions
    (swap,) = [change for change in changes if change.name == "conformance_state.grads.finalize"]
    assert "-> <code patched at tests/unit/test_detector.py:" in swap.detail


def _patching_function() -> Callable[[], str]:
    def patched() -> str:
        return "patched"

    return patched


@pytest.mark.parametrize("since", [False, True], ids=["full", "since"])
def test_a_patch_made_again_by_the_same_function_reads_as_another_object_not_as_no_change(
    since: bool, state_modules: tuple[ModuleType, ModuleType]
) -> None:
    """ms-swift's import re-applies its patch: the closure bound before and the one bound now have one name. The
    change is still a change, and its detail says so rather than printing that name on both sides of an arrow."""
    _, module = state_modules
    module.helper = _patching_function()
    before = capture_callable_state(["conformance_state"])
    module.helper = _patching_function()
    (change,) = callable_state_changes(before, _again(before, since))
    named = "<function tests.unit.test_detector._patching_function.<locals>.patched>"
    assert (change.kind, change.name) == ("module-attribute", "conformance_state.grads.helper")
    assert change.detail == f"re-bound to another object of the same name: {named}", change.detail
    module.helper = len
    (other,) = callable_state_changes(before, _again(before, since))
    assert other.detail.startswith(f"re-bound: {named} -> "), other.detail


@pytest.mark.parametrize("since", [False, True], ids=["full", "since"])
def test_callable_state_ignores_new_submodules_and_prefix_neighbours(
    since: bool, state_modules: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    package, _ = state_modules
    neighbour = ModuleType("conformance_statex")
    neighbour.f = len
    monkeypatch.setitem(sys.modules, neighbour.__name__, neighbour)
    before = capture_callable_state(("conformance_state",))
    assert "conformance_statex" not in before.modules
    package.late = ModuleType("conformance_state.late")  # the import system binding a new submodule
    neighbour.f = print
    assert callable_state_changes(before, _again(before, since)) == []


@pytest.mark.parametrize("since", [False, True], ids=["full", "since"])
def test_callable_state_sees_methods_bound_on_classes_not_class_data(
    since: bool,
    state_modules: tuple[ModuleType, ModuleType],
) -> None:
    """A method re-bound, added or deleted on a watched class is a ``class-attribute`` change; class-level data (a
    cache, a counter) is not compared, as module data globals are not."""
    _, module = state_modules
    before = capture_callable_state(("conformance_state",))

    def wrapped(self: object) -> str:
        return "wrapped"

    module.Reducer.reduce = wrapped
    module.Reducer.extra = staticmethod(len)
    module.Reducer.cache = {"a": 1}
    changes = callable_state_changes(before, _again(before, since))
    assert {(c.kind, c.name, c.detail.partition(":")[0]) for c in changes} == {
        ("class-attribute", "conformance_state.grads.Reducer.reduce", "re-bound"),
        ("class-attribute", "conformance_state.grads.Reducer.extra", "added"),
    }, format_effects(changes)
    del module.Reducer.extra
    after_delete = _again(before, since)
    middle = callable_state_changes(before, after_delete)
    assert ("class-attribute", "conformance_state.grads.Reducer.extra") not in {(c.kind, c.name) for c in middle}


def test_a_capture_since_another_takes_over_what_is_bound_as_it_was(
    state_modules: tuple[ModuleType, ModuleType],
) -> None:
    """Data re-bound in a module or a class (process-group globals, caches) leaves the functions and classes reached,
    and their states, those of the capture before: nothing is walked again."""
    _, module = state_modules
    before = capture_callable_state(("conformance_state",))
    module._GROUP = object()
    module.Reducer.cache = {"a": 1}
    after = _again(before, since=True)
    assert callable_state_changes(before, after) == []
    assert after.functions is before.functions and after.states is before.states
    assert after.class_bindings == before.class_bindings


def test_captures_each_since_the_last_see_what_whole_captures_see(
    state_modules: tuple[ModuleType, ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session watch's chain: each capture taken since the one before, compared with it, against a whole capture
    compared with the same one; a method added to a class is watched from then on, as is a module imported later."""
    _, module = state_modules

    def scaled(value: int, *, factor: int = 2, sizes: list[int] | None = None) -> int:
        return value * factor

    def patched(self: object) -> str:
        return "patched"

    module.scaled = scaled
    late = ModuleType("conformance_state.late")
    late.helper = len

    def add_method() -> None:
        module.Reducer.extra = lambda self: "extra"

    steps = {
        "code swapped": lambda: setattr(module.finalize, "__code__", patched.__code__),
        "keyword defaults filled in place": lambda: scaled.__kwdefaults__.update(factor=3, sizes=[1]),
        "a keyword default swapped for an equal object": lambda: scaled.__kwdefaults__.update(sizes=[1]),
        "method added": add_method,
        "the added method's code swapped": lambda: setattr(module.Reducer.extra, "__code__", patched.__code__),
        "module imported": lambda: monkeypatch.setitem(sys.modules, late.__name__, late),
        "the new module's function re-bound": lambda: setattr(late, "helper", print),
    }
    expected_empty = {"module imported"}
    last = capture_callable_state(("conformance_state",))
    for step, change in steps.items():
        change()
        since = _again(last, since=True)
        whole = _again(last, since=False)
        seen = [str(effect) for effect in callable_state_changes(last, since)]
        assert seen == [str(effect) for effect in callable_state_changes(last, whole)], step
        assert bool(seen) != (step in expected_empty), (step, seen)
        last = since
