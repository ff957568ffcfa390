"""The side-effect detector, driven through isolated loads of fixture packages that each seed one known effect."""

from __future__ import annotations

import _thread
import importlib
import logging
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from harness.contracts.imports.fake_modules import build_fakes
from harness.contracts.imports.isolation import load_isolated
from harness.contracts.imports.side_effects import KINDS, SideEffect, SideEffectDetector, detect, format_effects

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
    ("patches_class", _setup_patches_class, {("module-attribute", "conformance_watched.Layer.forward")}),
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
def test_allowing_the_kind_suppresses_it(
    fixture: str,
    setup: Callable[[pytest.MonkeyPatch, Path], dict[str, Any]],
    expected: set[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    options = setup(monkeypatch, tmp_path)
    fakes = options.pop("fakes", None)
    (kind,) = {kind for kind, _ in expected}
    module, effects = _load_detecting(fixture, fakes, allow={kind}, **options)
    _stop_worker(module)
    assert effects == [], format_effects(effects)


def test_allow_suppresses_exactly_the_allowed_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_PROBE_NOISY_LEVEL", raising=False)
    _, everything = _load_detecting("noisy")
    _, without_logs = _load_detecting("noisy", allow={"log-record"})
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
    assert {(effect.name, effect.detail) for effect in effects} == {
        ("CONFORMANCE_PROBE_GETENV", "read (unset)"),
        ("CONFORMANCE_PROBE_GET", "read (unset)"),
        ("CONFORMANCE_PROBE_SUBSCRIPT", "read (set)"),
        ("CONFORMANCE_PROBE_CONTAINS", "read (unset)"),
        ("CONFORMANCE_PROBE_GETENVB", "read (unset)"),
    }
    assert {effect.kind for effect in effects} == {"env-read"}
    assert ("env-read", "*") in _pairs(detect(lambda: dict(os.environ)))


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


@pytest.mark.parametrize("allow", [(), ("env-read",)])
def test_replacing_os_environ_is_reported_and_undone(allow: tuple[str, ...]) -> None:
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
    assert detect(lambda: setattr(probe, "rebound", object()), allow={"module-attribute"}) == []


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
        SideEffectDetector(allow={"env_read"})


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
