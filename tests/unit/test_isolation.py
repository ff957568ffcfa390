"""The isolation loader and declared fakes: what an isolated import may see, and what it must leave behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.contracts.imports.fake_modules import FakeModule, build_fakes
from harness.contracts.imports.isolation import (
    UNIQUE_PREFIX,
    Isolation,
    isolated_modules,
    load_isolated,
    observe_isolations,
)

FIXTURES = Path(__file__).resolve().parent.parent / "import_fixtures"

FAKES_SPEC = {
    "deep_ep": {"Buffer": "class", "Config": "class"},
    "megatron.core.distributed.finalize_model_grads": {
        "_allreduce_layernorm_grads": "function",
        "finalize_model_grads": "function",
    },
    "megatron.core": {"__version__": "0.15.0", "parallel_state": "module"},
    "torch_memory_saver": {},
}


@pytest.fixture(autouse=True)
def _no_bytecode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)


def _assert_same_modules(before: dict[str, object]) -> None:
    after = dict(sys.modules)
    assert after.keys() == before.keys(), (
        f"added {sorted(after.keys() - before.keys())}, removed {sorted(before.keys() - after.keys())}"
    )
    changed = [name for name, module in before.items() if after[name] is not module]
    assert not changed, f"re-bound in sys.modules: {changed}"


def test_package_with_relative_imports_loads_from_its_own_directory() -> None:
    before = dict(sys.modules)
    module = load_isolated(FIXTURES / "relative_pkg")
    assert module.__name__.startswith(UNIQUE_PREFIX)
    assert module.greet("gate") == "hello from relative_pkg.helpers, gate"
    assert module.helpers.__name__ == f"{module.__name__}.helpers"
    assert Path(module.helpers.__file__) == FIXTURES / "relative_pkg" / "helpers.py"
    assert module.__path__ == [str(FIXTURES / "relative_pkg")]
    _assert_same_modules(before)


def test_single_file_loads_from_a_path_string() -> None:
    module = load_isolated(str(FIXTURES / "single_module.py"))
    assert module.remember("a") == ["a"]
    assert Path(module.__file__) == FIXTURES / "single_module.py"
    assert not hasattr(module, "__path__")


def test_loads_by_module_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    before = dict(sys.modules)
    package = load_isolated("relative_pkg")
    single = load_isolated("single_module")
    assert package.greet("name") == "hello from relative_pkg.helpers, name"
    assert Path(single.__file__) == FIXTURES / "single_module.py"
    assert "relative_pkg" not in sys.modules
    _assert_same_modules(before)


def test_unknown_module_name_raises_module_not_found() -> None:
    before = dict(sys.modules)
    with pytest.raises(ModuleNotFoundError):
        load_isolated("conformance_module_that_is_not_installed")
    _assert_same_modules(before)


def test_directory_without_init_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImportError, match=r"no __init__\.py"):
        load_isolated(tmp_path)


def test_explicit_name_is_used_and_released() -> None:
    module = load_isolated(FIXTURES / "single_module.py", name="conformance_named_load")
    assert module.__name__ == "conformance_named_load"
    assert "conformance_named_load" not in sys.modules


def test_two_loads_of_one_file_share_no_state() -> None:
    first = load_isolated(FIXTURES / "single_module.py")
    second = load_isolated(FIXTURES / "single_module.py")
    assert first is not second
    assert first.__name__ != second.__name__
    assert first.remember("only-first") == ["only-first"]
    assert second.CALLS == []
    assert second.remember("only-second") == ["only-second"]


def test_fakes_are_importable_during_the_load_and_gone_after() -> None:
    fakes = build_fakes(FAKES_SPEC)
    before = dict(sys.modules)
    module = load_isolated(FIXTURES / "uses_fakes", fakes)
    assert isinstance(module.BUFFER, vars(fakes["deep_ep"])["Buffer"])
    assert (
        module.ALLREDUCE is vars(fakes["megatron.core.distributed.finalize_model_grads"])["_allreduce_layernorm_grads"]
    )
    assert module.SAVER is fakes["torch_memory_saver"]
    assert not module.HAS_LOW_LATENCY
    assert "deep_ep" not in sys.modules
    assert "torch_memory_saver" not in sys.modules
    _assert_same_modules(before)


def test_sys_modules_identical_after_a_load_that_raises() -> None:
    fakes = build_fakes(FAKES_SPEC)
    before = dict(sys.modules)
    with pytest.raises(RuntimeError, match=r"adapter failed to load after raises\.helper, deep_ep, colorsys"):
        load_isolated(FIXTURES / "raises", fakes)
    _assert_same_modules(before)


def test_sys_modules_identical_after_a_load_that_imports_a_missing_module() -> None:
    before = dict(sys.modules)
    with pytest.raises(ModuleNotFoundError) as raised:
        load_isolated(FIXTURES / "imports_missing")
    assert raised.value.name == "conformance_module_that_is_not_installed"
    _assert_same_modules(before)


def test_restore_unbinds_a_new_submodule_from_its_existing_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent_dir = tmp_path / "conformance_parent"
    parent_dir.mkdir()
    (parent_dir / "child.py").write_text("VALUE = 1\n")
    parent = ModuleType("conformance_parent")
    parent.__path__ = [str(parent_dir)]
    monkeypatch.setitem(sys.modules, "conformance_parent", parent)
    loaded = tmp_path / "loads_child.py"
    loaded.write_text("import conformance_parent.child\n\nCHILD = conformance_parent.child\n")
    before = dict(sys.modules)

    module = load_isolated(loaded)

    assert module.CHILD.VALUE == 1
    assert "child" not in vars(parent)
    _assert_same_modules(before)


def test_modules_replaced_by_the_loaded_code_are_put_back(tmp_path: Path) -> None:
    loaded = tmp_path / "replaces.py"
    loaded.write_text("import sys\nimport types\n\nsys.modules['json'] = types.ModuleType('json')\n")
    load_isolated(loaded)
    assert sys.modules["json"] is json


def test_real_submodules_of_a_faked_package_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    real, real_sub = ModuleType("conformance_real"), ModuleType("conformance_real.sub")
    monkeypatch.setitem(sys.modules, "conformance_real", real)
    monkeypatch.setitem(sys.modules, "conformance_real.sub", real_sub)
    fakes = build_fakes({"conformance_real.other": {}})
    before = dict(sys.modules)
    with isolated_modules(fakes):
        assert sys.modules["conformance_real"] is fakes["conformance_real"]
        assert sys.modules["conformance_real.other"] is fakes["conformance_real.other"]
        assert "conformance_real.sub" not in sys.modules
    _assert_same_modules(before)


def test_observers_see_what_an_isolated_load_imported() -> None:
    started: list[Isolation] = []
    finished: list[Isolation] = []
    fakes = build_fakes(FAKES_SPEC)
    with observe_isolations(started.append, finished.append):
        module = load_isolated(FIXTURES / "relative_pkg", fakes)
    load_isolated(FIXTURES / "single_module.py")
    assert started == finished
    assert len(finished) == 1
    (isolation,) = finished
    assert isolation.root == module.__name__
    assert isolation.origin == str(FIXTURES / "relative_pkg")
    assert set(isolation.fakes) == set(fakes)
    assert set(isolation.imported) == {module.__name__, f"{module.__name__}.helpers"}
    assert isolation.own == (module.__name__,)


def test_fake_tree_links_parents_children_and_packages() -> None:
    fakes = build_fakes(FAKES_SPEC)
    assert set(fakes) == {
        "deep_ep",
        "megatron",
        "megatron.core",
        "megatron.core.distributed",
        "megatron.core.distributed.finalize_model_grads",
        "megatron.core.parallel_state",
        "torch_memory_saver",
    }
    assert fakes.modules == dict(fakes.items())
    for name, module in fakes.items():
        assert isinstance(module, FakeModule)
        assert module.__name__ == name
        assert module.__spec__.name == name
        parent, _, child = name.rpartition(".")
        if parent:
            assert vars(fakes[parent])[child] is module
    packages = {name for name, module in fakes.items() if "__path__" in vars(module)}
    assert packages == {"megatron", "megatron.core", "megatron.core.distributed"}
    assert all(vars(fakes[name])["__path__"] == [] for name in packages)
    assert fakes["megatron"].__spec__.submodule_search_locations == []
    assert fakes.touched() == set()


def test_fake_attribute_kinds() -> None:
    fakes = build_fakes(FAKES_SPEC)
    deep_ep = vars(fakes["deep_ep"])
    buffer_class = deep_ep["Buffer"]
    assert isinstance(buffer_class, type)
    assert (buffer_class.__module__, buffer_class.__qualname__) == ("deep_ep", "Buffer")
    assert isinstance(buffer_class(1, group=None), buffer_class)
    assert deep_ep["Config"] is not buffer_class
    function = vars(fakes["megatron.core.distributed.finalize_model_grads"])["finalize_model_grads"]
    assert function([], config=None) is None
    assert function.__module__ == "megatron.core.distributed.finalize_model_grads"
    assert vars(fakes["megatron.core"])["__version__"] == "0.15.0"
    assert vars(fakes["megatron.core"])["parallel_state"] is fakes["megatron.core.parallel_state"]


def test_touched_reports_exactly_the_attributes_the_loaded_code_used() -> None:
    fakes = build_fakes(FAKES_SPEC)
    load_isolated(FIXTURES / "uses_fakes", fakes)
    assert fakes.touched() == {
        "deep_ep.Buffer",
        "megatron.core.distributed.finalize_model_grads._allreduce_layernorm_grads",
    }
    assert fakes.missing() == {"deep_ep.low_latency_mode"}
    fakes.reset()
    assert fakes.touched() == set()
    assert fakes.missing() == set()


def test_touched_ignores_dunders_and_child_modules() -> None:
    fakes = build_fakes(FAKES_SPEC)
    megatron = fakes["megatron"]
    assert megatron.__name__ == "megatron"
    assert megatron.core.distributed.finalize_model_grads.__spec__ is not None
    assert fakes.touched() == set()
    assert megatron.core.__version__ == "0.15.0"
    assert fakes.touched() == set()
    assert megatron.core.distributed.finalize_model_grads.finalize_model_grads is not None
    assert fakes.touched() == {"megatron.core.distributed.finalize_model_grads.finalize_model_grads"}


def test_an_attribute_declared_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="both as a module and as an attribute"):
        build_fakes({"pkg": {"sub": "function"}, "pkg.sub": {}})
