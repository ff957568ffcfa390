"""Which files a framework's modules are, in every layout Python imports (:mod:`harness.source.package_layout`),
which names are Megatron's (:mod:`harness.source.megatron_namespace`), and ``scan`` never ending in a traceback:
a file it cannot parse is named and left out, an error of its own reader is one line with status 70."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.formats.generator_error import GATE_ERROR_STATUS
from harness.source import package_layout, starter
from harness.source.megatron_namespace import is_megatron
from harness.source.package_layout import framework_files, unreadable_files


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def names(root: Path) -> set[str]:
    return set(framework_files(root).values())


def test_a_namespace_package_is_read_with_its_regular_subpackages(tmp_path: Path) -> None:
    write(tmp_path, {"fw/patches/apply.py": "", "fw/core/__init__.py": "", "fw/core/x.py": "", "my-scripts/a.py": ""})
    assert names(tmp_path) == {"fw.patches.apply", "fw.core", "fw.core.x"}


def test_a_src_layout_names_modules_from_inside_src(tmp_path: Path) -> None:
    write(tmp_path, {"src/fw/__init__.py": "", "src/fw/patch.py": "", "tests/test_fw.py": ""})
    assert names(tmp_path) == {"fw", "fw.patch"}


def test_a_package_scanned_on_its_own_keeps_the_namespace_its_imports_name(tmp_path: Path) -> None:
    bridge = write(
        tmp_path / "megatron" / "bridge",
        {"__init__.py": "", "models/__init__.py": "", "models/gpt.py": "from megatron.bridge.models import x\n"},
    )
    assert names(bridge) == {"megatron.bridge", "megatron.bridge.models", "megatron.bridge.models.gpt"}
    assert names(tmp_path / "megatron") == {"megatron.bridge", "megatron.bridge.models", "megatron.bridge.models.gpt"}


def test_a_regular_package_scanned_on_its_own_is_named_from_its_top(tmp_path: Path) -> None:
    package = write(tmp_path / "fw", {"__init__.py": "", "sub/__init__.py": "", "sub/m.py": ""})
    assert names(package / "sub") == {"fw.sub", "fw.sub.m"}


def test_a_project_root_with_an_init_of_its_own_is_a_path_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FlagScale's checkout has an ``__init__.py`` at its root beside ``pyproject.toml``; Primus' packages import
    ``primus.tools``. Both are imported with the root on ``sys.path``: ``flagscale.train``, not
    ``<root>.flagscale.train``. Seeded break: taking the root for a package names every module under it."""
    root = write(
        tmp_path / "flagscale",
        {
            "__init__.py": "",
            "pyproject.toml": "[project]\nname = 'flagscale'\n",
            "flagscale/__init__.py": "",
            "flagscale/train/patch.py": "from flagscale.train import x\n",
        },
    )
    assert names(root) == {"flagscale", "flagscale.train.patch"}
    monkeypatch.setattr(package_layout, "is_project_root", lambda folder: False)
    assert "flagscale.flagscale.train.patch" in names(root)


def test_megatrons_names_are_megatron_lms_own_packages() -> None:
    assert is_megatron("megatron") and is_megatron("megatron.core.parallel_state") and is_megatron("megatron.training")
    assert not is_megatron("megatron.bridge.models.Qwen3VLGPTModel")
    assert not is_megatron("megatron.energon") and not is_megatron("megatronic.core")


def test_an_unparsable_file_is_named_and_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, {"fw/__init__.py": "", "fw/ok.py": "x = 1\n", "fw/new_syntax.py": "def f(:\n"})
    assert names(tmp_path) == {"fw", "fw.ok"}
    assert [why.split(": ")[0] for why in unreadable_files(tmp_path)] == [f"{tmp_path / 'fw' / 'new_syntax.py'}:1"]


def test_an_error_of_the_reader_is_one_line_naming_the_file_with_status_70(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded break: the reader raising on a statement of the framework ends the scan with the gate's own status,
    one line naming the file, its line and the statement, and no traceback."""
    framework = write(tmp_path / "fw", {"fw/__init__.py": "", "fw/p.py": "import megatron.core.x as m\nm.f = 1\n"})
    monkeypatch.setattr(starter, "megatron_trees", lambda envdir: [tmp_path / "megatron-tree"])
    from harness.source import source_scan

    def broken(self: object, node: object) -> None:
        raise KeyError("seeded")

    monkeypatch.setattr(source_scan._Collector, "visit_Assign", broken)
    assert starter.main([str(framework)]) == GATE_ERROR_STATUS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{framework / 'fw' / 'p.py'}:2 (reading `m.f = 1`): KeyError: 'seeded'" in err
    assert "this is not a verdict on the framework" in err


def test_a_folder_with_no_module_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setattr(starter, "megatron_trees", lambda envdir: [tmp_path / "megatron-tree"])
    (tmp_path / "empty").mkdir()
    assert starter.main([str(tmp_path / "empty")]) == 2
    assert "no Python module to read under" in capsys.readouterr().err
