"""``candidate -- latest``'s comparison: the newest build per Python, and the cases red on it that passed on the
newest matrix release, with the source diff of the Megatron symbols behind them, on builds of a folder index."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.bisect.early_warning import latest_per_python, turned_red, warning_section
from harness.bisect.report import render_html, render_markdown
from harness.formats.junit import read_cases
from harness.targets.index_builds import BuildFile, index_builds
from tests.fake_index import CALLER_NEW, CALLER_OLD, NEW, OLD, wheel

BINDS = "cases/test_api_fingerprint.py::test_megatrons_calls_bind_to_the_replacements"
EXISTS = "cases/test_api_fingerprint.py::test_declared_symbols_exist"
IMPORTS = "cases/test_import_side_effects.py::test_import_changes_nothing"
RED_TEXT = (
    "[megatron-0.20] api-fingerprint: Megatron's own calls do not fit the replacements:\n"
    "megatron.core.widget:scale: Megatron's call at megatron/core/caller.py:5 (step: 2 positional) does not bind"
)


def _junit(path: Path, verdicts: dict[str, str]) -> Path:
    suite = ET.Element("testsuite")
    for nodeid, verdict in verdicts.items():
        module, name = nodeid.split("::")
        case = ET.SubElement(suite, "testcase", classname=module.removesuffix(".py").replace("/", "."), name=name)
        if verdict == "failed":
            ET.SubElement(case, "failure", message=RED_TEXT).text = RED_TEXT
    ET.ElementTree(suite).write(path)
    return path


def _index(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    folder.mkdir()
    for version, widget, caller, order in (("0.19.2", OLD, CALLER_OLD, 1), ("0.20.0rc0.dev5", NEW, CALLER_NEW, 2)):
        files = {"megatron/__init__.py": "", "megatron/core/__init__.py": ""}
        files |= {"megatron/core/widget.py": widget, "megatron/core/caller.py": caller}
        os.utime(wheel(folder, version, files), (1_700_000_000 + order * 86_400,) * 2)
    return folder


def test_only_what_passed_on_the_release_turned_red(tmp_path: Path) -> None:
    release = read_cases(_junit(tmp_path / "release.xml", {BINDS: "passed", EXISTS: "passed", IMPORTS: "failed"}))
    candidate = read_cases(_junit(tmp_path / "cand.xml", {BINDS: "failed", EXISTS: "passed", IMPORTS: "failed"}))
    assert [case.nodeid for case in turned_red(candidate, release)] == [BINDS]


def test_the_section_names_both_builds_the_turned_red_case_and_the_diff_behind_it(tmp_path: Path) -> None:
    builds = index_builds(str(_index(tmp_path)))
    [latest] = latest_per_python(builds, ["3.12", "3.12"])
    assert latest.build is not None and latest.build.version == "0.20.0rc0.dev5"
    release = next(b for b in builds if b.version == "0.19.2")
    release_cases = read_cases(_junit(tmp_path / "release.xml", {BINDS: "passed", IMPORTS: "failed"}))
    candidate_cases = read_cases(_junit(tmp_path / "cand.xml", {BINDS: "failed", IMPORTS: "failed"}))
    section = warning_section("3.12", latest.build, release, candidate_cases, release_cases, cache=tmp_path / "cache")
    assert section.cases == (BINDS,)
    assert "1 cases red on it and green on 0.19.2" in section.headline
    assert "1 more cases are red on both" in " ".join(section.notes)
    [symbol, call] = section.diffs
    assert "+def scale(x, factor, bias=0):" in symbol.diff
    assert call.role == "call site megatron/core/caller.py:5" and "+    return scale(x, 2, bias=1)" in call.diff
    assert "<details><summary>" in render_markdown([section]) and "0.20.0rc0.dev5" in render_html([section], "t")


def test_a_python_the_newest_builds_leave_behind_says_so(tmp_path: Path) -> None:
    builds = index_builds(str(_index(tmp_path)))
    newest = builds[-1]
    only_312 = type(newest)(newest.version, newest.uploaded, (BuildFile("x.whl", "file:///x", ">=3.12"),))
    older = builds[0]
    [on_311, on_312] = latest_per_python([older, only_312], ["3.12", "3.11"])
    assert (on_311.python, on_311.build.version) == ("3.11", older.version)
    assert on_312.build.version == newest.version
    section = warning_section("3.11", older, newest, [], [], cache=tmp_path / "cache")
    assert "nothing on the index newer than 0.19.2 installs on Python 3.11" in " ".join(section.notes)
