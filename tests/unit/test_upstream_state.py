"""Megatron put back after a framework's code ran: every name of the loaded modules of the watched libraries, and of
the classes they define, whatever the code bound, added or raised on the way (a stand-in library here, so the test
owns every module it patches)."""

from __future__ import annotations

import enum
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from harness.subjects.upstream_state import UpstreamNotRestored, restore_upstream, upstream_restored, upstream_state

LIBRARY = "upstreamlib"


def _original_ops() -> str:
    return "Megatron's"


@pytest.fixture
def library() -> Iterator[tuple[ModuleType, ModuleType]]:
    """``upstreamlib`` and ``upstreamlib.p2p`` in ``sys.modules``: a module function and a class defined there."""
    root, p2p = ModuleType(LIBRARY), ModuleType(f"{LIBRARY}.p2p")

    class Router:
        def gating(self, logits: object) -> object:
            return logits

    Router.__module__ = p2p.__name__
    p2p.Router = Router
    p2p._batched_p2p_ops = _original_ops
    p2p.TIMEOUT = 30
    root.p2p = p2p
    sys.modules.update({root.__name__: root, p2p.__name__: p2p})
    yield root, p2p
    for name in [n for n in sys.modules if n == LIBRARY or n.startswith(f"{LIBRARY}.")]:
        del sys.modules[name]


def _framework_import(p2p: ModuleType) -> None:
    """What ms-swift's ``swift.megatron`` does when imported, in small: re-binds, adds, marks and sets a method."""
    p2p._batched_p2p_ops = lambda: "the framework's"
    p2p.added_by_framework = print
    p2p.TIMEOUT = 5
    p2p.Router.gating = lambda self, logits: None
    p2p.Router._patched = True


def test_every_name_of_the_modules_and_their_classes_is_put_back(library: tuple[ModuleType, ModuleType]) -> None:
    _, p2p = library
    gating = vars(p2p.Router)["gating"]
    state = upstream_state((LIBRARY,), (LIBRARY,))
    _framework_import(p2p)
    assert restore_upstream(state, data_libraries=(LIBRARY,)) == []
    assert p2p._batched_p2p_ops is _original_ops and p2p.TIMEOUT == 30
    assert not hasattr(p2p, "added_by_framework")
    assert vars(p2p.Router)["gating"] is gating and "_patched" not in vars(p2p.Router)


def test_a_class_outside_the_class_libraries_is_left_alone(library: tuple[ModuleType, ModuleType]) -> None:
    """Only the classes of the class libraries are put back: the module's names still are."""
    _, p2p = library
    state = upstream_state((LIBRARY,), ("elsewhere",))
    _framework_import(p2p)
    restore_upstream(state)
    assert p2p._batched_p2p_ops is _original_ops
    assert vars(p2p.Router)["_patched"] is True


def test_a_submodule_imported_meanwhile_stays_importable(library: tuple[ModuleType, ModuleType]) -> None:
    root, _ = library
    state = upstream_state((LIBRARY,), (LIBRARY,))
    late = ModuleType(f"{LIBRARY}.late")
    sys.modules[late.__name__] = late
    root.late = late
    restore_upstream(state)
    assert root.late is late


def test_the_block_is_put_back_also_where_it_raised(library: tuple[ModuleType, ModuleType]) -> None:
    """An import that raised after its first patches (ms-swift beside fake Megatron modules) leaves nothing."""
    _, p2p = library
    gating = vars(p2p.Router)["gating"]
    with pytest.raises(AttributeError), upstream_restored(libraries=(LIBRARY,), class_libraries=(LIBRARY,)):
        _framework_import(p2p)
        raise AttributeError("module 'megatron.core' has no attribute '__version__'")
    assert p2p._batched_p2p_ops is _original_ops and vars(p2p.Router)["gating"] is gating


def test_a_module_first_imported_in_the_block_is_put_back_where_it_was_preloaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module first imported inside the block has no earlier state: its patch stays (the seeded break), unless the
    caller preloads it, as the harness preloads the modules of the symbols a declaration says are replaced."""
    package = tmp_path / "upstreamfile"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text("def batched():\n    return 'original'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for preload, stays_patched in (([], True), (["upstreamfile.ops", "no_such_module_anywhere"], False)):
            with upstream_restored(preload, libraries=("upstreamfile",)):
                importlib.import_module("upstreamfile.ops").batched = None
            assert (sys.modules["upstreamfile.ops"].batched is None) is stays_patched
            del sys.modules["upstreamfile.ops"], sys.modules["upstreamfile"]
    finally:
        for name in ("upstreamfile.ops", "upstreamfile"):
            sys.modules.pop(name, None)


def test_outside_the_data_libraries_only_callables_are_put_back(library: tuple[ModuleType, ModuleType]) -> None:
    """torch's own bookkeeping (``torch.cuda._initialized``, the process-group counter) stays as the block left it:
    putting it back would hide a CUDA context the block made."""
    _, p2p = library
    state = upstream_state((LIBRARY,), (LIBRARY,))
    _framework_import(p2p)
    p2p.counter_added = 1
    assert restore_upstream(state, data_libraries=()) == []
    assert p2p._batched_p2p_ops is _original_ops and not hasattr(p2p, "added_by_framework")
    assert p2p.TIMEOUT == 5 and p2p.counter_added == 1


def test_a_stand_in_module_bound_by_the_block_is_dropped(library: tuple[ModuleType, ModuleType]) -> None:
    root, _ = library
    state = upstream_state((LIBRARY,), (LIBRARY,))
    root.stand_in = ModuleType("not_a_submodule")
    restore_upstream(state)
    assert not hasattr(root, "stand_in")


def test_what_cannot_be_put_back_is_named_and_the_rest_is_back(library: tuple[ModuleType, ModuleType]) -> None:
    """A member added to an ``Enum`` refuses ``delattr``: named, after everything else is put back; where the block
    raised, its error stays the error and says so in a note."""
    _, p2p = library

    class ModelType(enum.Enum):
        encoder_or_decoder = 1

    ModelType.__module__, ModelType.__qualname__ = p2p.__name__, "ModelType"
    p2p.ModelType = ModelType
    for raised in (None, KeyError("the block's own")):
        with pytest.raises(KeyError if raised else UpstreamNotRestored) as caught:
            with upstream_restored(libraries=(LIBRARY,), class_libraries=(LIBRARY,)):
                _framework_import(p2p)
                type.__setattr__(ModelType, "extra", 2)  # a member added as extend_enum-style recipes add one
                ModelType._member_map_["extra"] = 2
                if raised:
                    raise raised
        text = str(caught.value) + "".join(getattr(caught.value, "__notes__", []))
        assert f"{p2p.__name__}.ModelType.extra (AttributeError" in text, text
        assert p2p._batched_p2p_ops is _original_ops
        del ModelType._member_map_["extra"]
        type.__delattr__(ModelType, "extra")
