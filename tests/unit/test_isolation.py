"""The isolation loader and declared fakes: what an isolated import may see, and what it must leave behind."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from harness.contracts.import_side_effects.detector import detect, format_effects
from harness.contracts.import_side_effects.fake_modules import FakeModule, build_fakes
from harness.contracts.import_side_effects.isolation import (
    UNIQUE_PREFIX,
    Isolation,
    adapter_import_root,
    adapter_location,
    isolated_modules,
    load_isolated,
    observe_isolations,
)

FIXTURES = Path(__file__).resolve().parent.parent / "import_fixtures"
FRAMEWORK_ROOT = FIXTURES / "framework_root"
FAKE_ONLY_SPEC = {"megatron": {}, "deep_ep": {"Buffer": "class"}}
SUBMODULES_MADE = {
    "megatron.core",
    "megatron.core.distributed",
    "megatron.core.distributed.finalize_model_grads",
    "megatron.core.parallel_state",
    "megatron.core.transformer",
    "megatron.core.transformer.module",
    # ``from m import MegatronModule`` cannot tell a submodule from an attribute: undeclared, it is made a module too.
    "megatron.core.transformer.module.MegatronModule",
}

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


def _real_finalize_module() -> ModuleType:
    """A stand-in for the installed ``finalize_model_grads``: what the fakes mirror, as the case snapshots it."""
    real = ModuleType("megatron.core.distributed.finalize_model_grads")

    def _get_main_grad_attr(param: object, use_custom_fsdp: bool = False) -> str:
        return "main_grad"

    class DistributedDataParallelConfig:
        def __init__(self, grad_reduce_in_fp32: bool = False, *, overlap_grad_reduce: bool = False) -> None:
            pass

    real._get_main_grad_attr = _get_main_grad_attr
    real.DistributedDataParallelConfig = DistributedDataParallelConfig
    real.HAVE_TE = False
    return real


def test_fakes_keep_the_real_signatures_of_functions_and_classes() -> None:
    """An adapter that inspects a Megatron function's signature at import, catching only ImportError, loads beside
    the fakes as it does beside the real Megatron: the fake is a callable with the real ``__signature__``."""
    real = _real_finalize_module()
    fakes = build_fakes(FAKE_ONLY_SPEC, originals={real.__name__: real})
    before = dict(sys.modules)
    module = load_isolated(FIXTURES / "inspects_signature", fakes)
    _assert_same_modules(before)
    assert module.PARAMETERS == ("param", "use_custom_fsdp") and module.TAKES_FSDP_FLAG
    assert fakes.mirrored() == {f"{real.__name__}._get_main_grad_attr"}
    assert f"{real.__name__}._get_main_grad_attr" in fakes.touched()
    fake_function = module._get_main_grad_attr
    assert fake_function is not real._get_main_grad_attr and fake_function(object()) is None
    assert fake_function.__module__ == real.__name__ and fake_function.__name__ == "_get_main_grad_attr"
    finalize = fakes.make_child(real.__name__)
    assert finalize is not None and vars(finalize)["_get_main_grad_attr"] is fake_function
    fake_class = finalize.DistributedDataParallelConfig
    assert isinstance(fake_class, type) and fake_class is not real.DistributedDataParallelConfig
    assert inspect.signature(fake_class) == inspect.signature(real.DistributedDataParallelConfig)
    assert list(inspect.signature(fake_class).parameters) == ["grad_reduce_in_fp32", "overlap_grad_reduce"]
    fake_class(True, overlap_grad_reduce=True)
    # Only functions and classes are mirrored: a flag the adapter reads is as undeclared as before.
    with pytest.raises(AttributeError):
        finalize.HAVE_TE  # noqa: B018
    assert f"{real.__name__}.HAVE_TE" in fakes.missing()


def test_without_originals_a_signature_at_import_still_fails_beside_the_fakes() -> None:
    """The seeded break the mirror fixes: the same fixture, beside fakes that know no real Megatron, raises."""
    fakes = build_fakes(FAKE_ONLY_SPEC)
    with pytest.raises(TypeError, match="not a callable object"):
        load_isolated(FIXTURES / "inspects_signature", fakes)


def test_fakes_carry_the_real_version() -> None:
    """An adapter that picks its code path by ``megatron.core.__version__`` at import loads beside the fakes."""
    real_core = ModuleType("megatron.core")
    real_core.__version__ = "0.15.3"
    fakes = build_fakes(FAKE_ONLY_SPEC, originals={"megatron.core": real_core})
    before = dict(sys.modules)
    module = load_isolated(FIXTURES / "reads_version", fakes)
    _assert_same_modules(before)
    assert module.MEGATRON_VERSION == (0, 15)


def test_without_originals_a_version_check_at_import_fails_beside_the_fakes() -> None:
    fakes = build_fakes(FAKE_ONLY_SPEC)
    before = dict(sys.modules)
    with pytest.raises(AttributeError, match="__version__"):
        load_isolated(FIXTURES / "reads_version", fakes)
    _assert_same_modules(before)


def test_an_import_that_needs_more_than_signatures_still_raises_beside_the_fakes() -> None:
    @dataclasses.dataclass
    class DistributedDataParallelConfig:
        grad_reduce_in_fp32: bool = False

    real = ModuleType("megatron.core.distributed")
    real.DistributedDataParallelConfig = DistributedDataParallelConfig
    fakes = build_fakes(FAKE_ONLY_SPEC, originals={real.__name__: real})
    before = dict(sys.modules)
    with pytest.raises(TypeError, match="dataclass"):
        load_isolated(FIXTURES / "raises_beside_fakes", fakes)
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
    # Every fake is a package, so that submodules below any of them can be made on demand.
    assert all(vars(module)["__path__"] == [] for module in fakes.values())
    assert all(module.__spec__.submodule_search_locations == [] for module in fakes.values())
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


def _assert_same_meta_path(before: list[object]) -> None:
    assert [id(finder) for finder in sys.meta_path] == [id(finder) for finder in before], sys.meta_path


def test_fake_only_load_makes_the_megatron_submodules_it_imports() -> None:
    fakes = build_fakes(FAKE_ONLY_SPEC)
    before, meta_path = dict(sys.modules), list(sys.meta_path)
    finished: list[Isolation] = []
    with observe_isolations(lambda isolation: None, finished.append):
        module = load_isolated(FIXTURES / "uses_megatron_submodules", fakes)
    assert fakes.created() == SUBMODULES_MADE
    assert fakes.touched() == set()
    assert fakes.missing() == set(), "a name imported as a submodule is not a missing attribute"
    megatron = fakes["megatron"]
    assert module.PARALLEL_STATE is megatron.core.parallel_state
    assert module.FINALIZE is megatron.core.distributed.finalize_model_grads
    assert module.MODULE is megatron.core.transformer.module.MegatronModule
    for name in SUBMODULES_MADE:
        parent, _, child = name.rpartition(".")
        made = vars(fakes[parent] if parent in fakes else _walk(megatron, parent))[child]
        assert isinstance(made, FakeModule)
        assert made.__name__ == made.__spec__.name == name
        assert vars(made)["__path__"] == [] and made.__loader__ is None
    assert set(fakes) == {"megatron", "deep_ep"}, "the declared tree stays as declared"
    (isolation,) = finished
    assert set(isolation.created) == SUBMODULES_MADE
    assert set(isolation.imported) == {module.__name__}
    _assert_same_modules(before)
    _assert_same_meta_path(meta_path)


def _walk(module: ModuleType, dotted: str) -> ModuleType:
    for part in dotted.split(".")[1:]:
        module = vars(module)[part]
    return module


def test_a_second_load_reuses_and_records_the_submodules_made() -> None:
    fakes = build_fakes(FAKE_ONLY_SPEC)
    first = load_isolated(FIXTURES / "uses_megatron_submodules", fakes)
    fakes.reset()
    assert fakes.created() == set()
    second = load_isolated(FIXTURES / "uses_megatron_submodules", fakes)
    assert second.PARALLEL_STATE is first.PARALLEL_STATE
    assert second.FINALIZE is first.FINALIZE
    assert fakes.created() == SUBMODULES_MADE


def test_fake_only_load_of_megatron_submodules_has_no_side_effects(tmp_path: Path) -> None:
    fakes = build_fakes(FAKE_ONLY_SPEC)
    effects = detect(lambda: load_isolated(FIXTURES / "uses_megatron_submodules", fakes), file_root=tmp_path)
    assert effects == [], format_effects(effects)


def test_sys_modules_and_meta_path_identical_after_a_fake_only_load_that_raises(tmp_path: Path) -> None:
    package = tmp_path / "raises_after_megatron"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from megatron.core import parallel_state\n"
        "import megatron.core.models.gpt\n\n"
        "raise RuntimeError(f'failed after {parallel_state.__name__}')\n"
    )
    fakes = build_fakes(FAKE_ONLY_SPEC)
    before, meta_path = dict(sys.modules), list(sys.meta_path)
    with pytest.raises(RuntimeError, match=r"failed after megatron\.core\.parallel_state"):
        load_isolated(package, fakes)
    assert fakes.created() == {
        "megatron.core",
        "megatron.core.parallel_state",
        "megatron.core.models",
        "megatron.core.models.gpt",
    }
    _assert_same_modules(before)
    _assert_same_meta_path(meta_path)


def test_the_finder_is_in_meta_path_only_during_the_block() -> None:
    fakes = build_fakes({"conformance_fake": {}})
    meta_path = list(sys.meta_path)
    with isolated_modules(fakes):
        (added,) = [finder for finder in sys.meta_path if all(finder is not old for old in meta_path)]
        assert sys.meta_path[0] is added
    _assert_same_meta_path(meta_path)
    with isolated_modules({"conformance_plain": ModuleType("conformance_plain")}):
        _assert_same_meta_path(meta_path)  # hand-made fakes are not FakeModules: nothing is made on demand
    with pytest.raises(RuntimeError), isolated_modules(fakes):
        raise RuntimeError("the block fails")
    _assert_same_meta_path(meta_path)


def test_importing_a_name_a_fake_binds_to_an_attribute_fails_as_it_would_for_real() -> None:
    fakes = build_fakes({"conformance_fake": {"function": "function", "value": None}})
    before = dict(sys.modules)
    with isolated_modules(fakes):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("conformance_fake.function")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("conformance_fake.value")
        assert callable(vars(fakes["conformance_fake"])["function"])
        made = importlib.import_module("conformance_fake.sub.deeper")
        assert made is fakes["conformance_fake"].sub.deeper
    assert fakes.created() == {"conformance_fake.sub", "conformance_fake.sub.deeper"}
    assert fakes.make_child("conformance_fake.value") is None
    assert fakes.make_child("conformance_elsewhere.sub") is None
    assert vars(fakes["conformance_fake"])["value"] is None
    _assert_same_modules(before)


def test_attribute_access_on_a_fake_is_not_on_demand() -> None:
    fakes = build_fakes(FAKE_ONLY_SPEC)
    with isolated_modules(fakes):
        with pytest.raises(AttributeError):
            _ = fakes["megatron"].core
        assert getattr(fakes["deep_ep"], "low_latency_mode", None) is None
    assert fakes.missing() == {"megatron.core", "deep_ep.low_latency_mode"}
    assert fakes.created() == set()


def test_a_real_submodule_of_a_faked_package_is_replaced_by_a_fake_on_import(monkeypatch: pytest.MonkeyPatch) -> None:
    real, real_sub = ModuleType("conformance_real"), ModuleType("conformance_real.sub")
    real.__path__ = []
    monkeypatch.setitem(sys.modules, "conformance_real", real)
    monkeypatch.setitem(sys.modules, "conformance_real.sub", real_sub)
    fakes = build_fakes({"conformance_real": {}})
    before = dict(sys.modules)
    with isolated_modules(fakes):
        imported = importlib.import_module("conformance_real.sub")
        assert imported is not real_sub
        assert isinstance(imported, FakeModule)
    assert fakes.created() == {"conformance_real.sub"}
    assert "sub" not in vars(real)
    _assert_same_modules(before)


def test_adapter_location_of_paths() -> None:
    assert adapter_location(FIXTURES / "relative_pkg") == FIXTURES / "relative_pkg"
    assert adapter_location(str(FIXTURES / "relative_pkg" / "__init__.py")) == FIXTURES / "relative_pkg"
    assert adapter_location(str(FIXTURES / "single_module.py")) == FIXTURES / "single_module.py"
    with pytest.raises(ModuleNotFoundError, match="not_there"):
        adapter_location(str(FIXTURES / "not_there"))


def test_adapter_location_of_module_names_imports_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.syspath_prepend(str(FRAMEWORK_ROOT))
    before = dict(sys.modules)
    assert adapter_location("relative_pkg") == FIXTURES / "relative_pkg"
    assert adapter_location("single_module") == FIXTURES / "single_module.py"
    adapter = FRAMEWORK_ROOT / "myframework" / "megatron_adapter"
    assert adapter_location("myframework.megatron_adapter") == adapter
    assert adapter_location("myframework.megatron_adapter.patches") == adapter / "patches.py"
    assert adapter_location("myframework.utils") == FRAMEWORK_ROOT / "myframework" / "utils.py"
    assert adapter_import_root("myframework.megatron_adapter") == (FRAMEWORK_ROOT, "myframework.megatron_adapter")
    assert adapter_import_root(str(adapter)) == (FRAMEWORK_ROOT, "myframework.megatron_adapter")
    assert adapter_import_root(FIXTURES / "relative_pkg") == (FIXTURES, "relative_pkg")
    assert adapter_import_root("single_module") == (FIXTURES, "single_module")
    assert capsys.readouterr().out == "", "myframework/__init__.py ran"
    _assert_same_modules(before)


def test_adapter_location_of_a_dotted_name_below_an_imported_package(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = ModuleType("conformance_imported")
    parent.__path__ = [str(FIXTURES)]
    monkeypatch.setitem(sys.modules, "conformance_imported", parent)
    assert adapter_location("conformance_imported.relative_pkg") == FIXTURES / "relative_pkg"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("conformance_module_that_is_not_installed", "'conformance_module_that_is_not_installed'"),
        ("myframework.not_there", "'myframework.not_there'"),
        ("conformance_module_that_is_not_installed.sub", "looking for 'conformance_module_that_is_not_installed.sub'"),
        ("myframework.utils.helper", "'myframework.utils' is not a package"),
        ("not a module", "'not a module' is neither a path nor a module name"),
    ],
)
def test_adapter_location_of_an_unknown_name_says_which(
    spec: str, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(FRAMEWORK_ROOT))
    before = dict(sys.modules)
    with pytest.raises(ModuleNotFoundError) as raised:
        adapter_location(spec)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert capsys.readouterr().out == ""
    _assert_same_modules(before)


def test_framework_adapter_loads_by_dotted_name_without_running_the_framework_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(FRAMEWORK_ROOT))
    before, path = dict(sys.modules), list(sys.path)
    quiet = load_isolated("myframework.quiet_adapter")
    assert quiet.VALUE == "quiet"
    assert capsys.readouterr().out == "", "finding the adapter ran myframework/__init__.py"

    finished: list[Isolation] = []
    with observe_isolations(lambda isolation: None, finished.append):
        adapter = load_isolated("myframework.megatron_adapter")
    assert adapter.HELPED == "helped by myframework.utils"
    assert adapter.PATCHED == ("finalize_model_grads",)
    assert adapter.patches.__name__ == f"{adapter.__name__}.patches"
    assert capsys.readouterr().out == "myframework/__init__.py ran\n", "only the adapter's own import runs it"
    (isolation,) = finished
    assert isolation.own == (adapter.__name__, "myframework")
    assert {"myframework", "myframework.utils"} <= set(isolation.imported)
    assert sys.path == path
    _assert_same_modules(before)


def test_framework_adapter_loads_by_path_with_the_source_root_on_sys_path_only_during_the_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = str(FRAMEWORK_ROOT)
    assert root not in sys.path
    before, path, cached = dict(sys.modules), list(sys.path), root in sys.path_importer_cache
    finished: list[Isolation] = []
    with observe_isolations(lambda isolation: None, finished.append):
        adapter = load_isolated(FRAMEWORK_ROOT / "myframework" / "megatron_adapter")
    assert adapter.HELPED == "helped by myframework.utils"
    assert capsys.readouterr().out == "myframework/__init__.py ran\n"
    (isolation,) = finished
    assert isolation.own == (adapter.__name__, "myframework")
    assert sys.path == path
    assert (root in sys.path_importer_cache) == cached
    _assert_same_modules(before)


def test_sys_path_and_modules_identical_after_a_framework_adapter_that_raises(tmp_path: Path) -> None:
    framework = tmp_path / "src" / "conformance_framework"
    (framework / "adapter").mkdir(parents=True)
    (framework / "__init__.py").write_text("")
    (framework / "utils.py").write_text("NAME = 'utils'\n")
    (framework / "adapter" / "__init__.py").write_text(
        "from conformance_framework.utils import NAME\n\nraise RuntimeError(f'adapter failed after {NAME}')\n"
    )
    before, path, meta_path = dict(sys.modules), list(sys.path), list(sys.meta_path)
    with pytest.raises(RuntimeError, match="adapter failed after utils"):
        load_isolated(framework / "adapter", build_fakes(FAKE_ONLY_SPEC))
    assert sys.path == path
    assert str(tmp_path / "src") not in sys.path_importer_cache
    _assert_same_meta_path(meta_path)
    _assert_same_modules(before)


def test_a_dotted_adapter_loads_under_its_own_name_and_runs_again_when_already_imported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(FRAMEWORK_ROOT))
    first = load_isolated("myframework.megatron_adapter")
    capsys.readouterr()
    with isolated_modules():
        imported = importlib.import_module("myframework.megatron_adapter")
        before = dict(sys.modules)
        again = load_isolated("myframework.megatron_adapter")
        assert again.__name__ == first.__name__ == "myframework.megatron_adapter"
        assert again is not imported and again.patches is not imported.patches
        assert sys.modules["myframework.megatron_adapter"] is imported
        _assert_same_modules(before)
