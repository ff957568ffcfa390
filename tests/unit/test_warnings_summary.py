"""The installed packages' warnings, one line per kind: which warnings are grouped (the rule), how they are grouped,
and a session of the plugin in which the grouping leaves the red, the skip reason and a warning of the code under
test where pytest puts them, with pytest's full list one flag away."""

from __future__ import annotations

import json.decoder
import subprocess
import sys
import sysconfig
import textwrap
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import REPO_ROOT
from harness.plugin import session_state
from harness.plugin.warnings_summary import (
    ALL_WARNINGS,
    FULL_LIST,
    RUNNER_PACKAGES,
    Ownership,
    divert_rank_warnings,
    grouped_lines,
    installed_dirs,
    ownership_of,
    rank_warnings,
)
from harness.subjects.declaration import read_declaration_file
from harness.subjects.loading import SubjectRef

APEX = "Apex is not installed. Falling back to Torch Norm"
MLP = "MLP requires ffn_hidden_size, but it was not provided. Using{}config.ffn_hidden_size by default."
MLP_ONE_LINE = MLP.format(" ")


def test_one_line_per_kind_the_most_frequent_first_then_the_full_list_flag() -> None:
    seen = [
        ("UserWarning", APEX, "megatron.core.models"),
        *[("DeprecationWarning", MLP.format(" " * 21), "megatron.core.transformer")] * 12,
        ("UserWarning", APEX, "megatron.core.models.gpt"),
        ("DeprecationWarning", APEX, "megatron.core.models"),
    ]
    assert grouped_lines(seen, 200) == [
        f"12x DeprecationWarning from megatron.core.transformer: {MLP_ONE_LINE}",
        f" 2x UserWarning from megatron.core.models: {APEX}",
        f" 1x DeprecationWarning from megatron.core.models: {APEX}",
        FULL_LIST,
    ]
    assert FULL_LIST == "full list: add -- --all-warnings"


def test_addresses_do_not_split_a_kind_and_packages_without_a_common_one_are_named() -> None:
    seen = [
        ("ResourceWarning", "unclosed <socket.socket fd=3 at 0x7f01a2b3c4d0>", "torch.distributed"),
        ("ResourceWarning", "unclosed <socket.socket fd=3 at 0x7f0199999990>", "megatron.core.parallel_state"),
    ]
    assert grouped_lines(seen, 200) == [
        "2x ResourceWarning from megatron, torch: unclosed <socket.socket fd=3 at 0x...>",
        FULL_LIST,
    ]


def test_a_line_is_cut_to_the_width_and_a_deep_package_to_three_levels() -> None:
    package = "megatron.core.distributed.fsdp.src.megatron_fsdp"
    [line, last] = grouped_lines([("UserWarning", "Transformer Engine and Apex are not installed " * 3, package)], 60)
    assert line == "1x UserWarning from megatron.core.distributed: Transforme..."
    assert len(line) == 60 and last == FULL_LIST


@pytest.fixture
def ownership(tmp_path: Path) -> Ownership:
    """A venv's site-packages inside a checkout, a standard library holding the base site-packages where the gate's
    wheel put the harness, a subject package ``modernrl``."""
    site = tmp_path / "checkout" / ".nox" / "megatron-0-15" / "lib" / "python3.11" / "site-packages"
    stdlib = tmp_path / "base" / "lib" / "python3.11"
    wheel_harness = stdlib / "site-packages" / "megatron_conformance" / "harness"
    own_packages = frozenset({*RUNNER_PACKAGES, "modernrl"})
    return Ownership((site, stdlib), (tmp_path / "checkout" / "harness", wheel_harness), own_packages)


def test_installed_packages_and_the_standard_library_are_grouped_by_the_package_of_their_file(
    ownership: Ownership,
) -> None:
    site, stdlib = ownership.installed
    package = ownership.installed_package
    assert package(str(site / "megatron/core/fusions/fused_layer_norm.py")) == "megatron.core.fusions"
    assert package(str(site / "megatron/core/__init__.py")) == "megatron.core"
    assert package(str(site / "torch/distributed/c10d_logger.py")) == "torch.distributed"
    assert package(str(site / "six.py")) == "six"
    assert package(str(stdlib / "importlib/__init__.py")) == "importlib"
    assert package("<frozen importlib._bootstrap>") == "importlib"


def test_the_subject_the_harness_the_runner_and_unknown_origins_stay_in_pytests_summary(
    ownership: Ownership, tmp_path: Path
) -> None:
    site, stdlib = ownership.installed
    package = ownership.installed_package
    assert package(str(site / "modernrl/backends/megatron_utils/grad_chunking.py")) is None
    assert package(str(site / "_pytest/unraisableexception.py")) is None
    assert package(str(site / "hypothesis/errors.py")) is None
    assert package(str(tmp_path / "checkout/harness/plugin/gate.py")) is None
    assert package(str(tmp_path / "checkout/cases/test_smoke.py")) is None
    assert package(str(stdlib / "site-packages/megatron_conformance/harness/plugin/gate.py")) is None
    assert package("sys") is None
    assert package("<string>") is None


def test_this_interpreters_standard_library_is_installed_and_deeper_directories_come_first() -> None:
    dirs = installed_dirs()
    assert [len(d.parts) for d in dirs] == sorted((len(d.parts) for d in dirs), reverse=True)
    assert Ownership(dirs, (), frozenset()).installed_package(json.decoder.__file__) == "json"


@pytest.mark.parametrize(
    ("spec", "packages", "dirs"),
    [
        ("mypkg.megatron_adapter", {"mypkg"}, set()),
        ("harness/sensitivity/seeded/chunk_splitting_last_dropped.py", set(), set()),
        ("harness/reference", set(), {"harness/reference"}),
        ("tests/frameworks/modernrl/megatron-conformance.toml", {"modernrl"}, {"tests/frameworks/modernrl"}),
    ],
)
def test_the_subject_in_force_is_owned_whether_a_module_a_path_or_a_declaration(
    spec: str, packages: set[str], dirs: set[str]
) -> None:
    path = REPO_ROOT / spec
    declaration = read_declaration_file(path) if spec.endswith(".toml") else None
    name = str(path) if path.exists() else spec
    stash = pytest.Stash()
    stash[session_state.TARGET] = None
    stash[session_state.SUBJECT_REF] = SubjectRef(spec, name, declaration)
    ownership = ownership_of(SimpleNamespace(stash=stash))
    assert ownership.own_packages - RUNNER_PACKAGES == packages
    own_dirs = {d.relative_to(REPO_ROOT).as_posix() for d in ownership.own_dirs}
    file_subject = {spec} if spec.endswith(".py") else set()
    assert own_dirs == {"harness", "cases", *dirs, *file_subject}


CASES = """
    import sysconfig
    import warnings
    from pathlib import Path

    import pytest

    MEGATRON = Path(sysconfig.get_paths()["purelib"]) / "megatron" / "core" / "fusions" / "fused_layer_norm.py"

    def test_upstream_noise():
        for _ in range(3):
            warnings.warn_explicit("{apex}", UserWarning, str(MEGATRON), 21)

    def test_skipped():
        pytest.skip("seeded skip reason")

    def test_red():
        warnings.warn("the code under test's own warning", UserWarning)
        assert False, "seeded red"
"""


def _session(tmp_path: Path, *options: str) -> tuple[int, list[str], str]:
    """Exit status, output lines, and the fake Megatron file's path of a session of the plugin alone (no target)."""
    cases = tmp_path / "test_noise.py"
    cases.write_text(textwrap.dedent(CASES.format(apex=APEX)))
    command = [sys.executable, "-m", "pytest", "-c", str(REPO_ROOT / "harness/plugin/cases.ini")]
    command += ["-p", "harness.plugin.warnings_summary", "--rootdir", str(tmp_path), "-rfs", *options, str(cases)]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    megatron = str(Path(sysconfig.get_paths()["purelib"]) / "megatron")
    return completed.returncode, completed.stdout.splitlines(), megatron


def _index(lines: list[str], text: str) -> int:
    found = [i for i, line in enumerate(lines) if text in line]
    assert found, f"no line with {text!r} in:\n" + "\n".join(lines)
    return found[0]


def test_a_session_groups_the_noise_between_the_red_and_the_short_summary_leaving_the_rest_whole(
    tmp_path: Path,
) -> None:
    status, lines, megatron = _session(tmp_path)
    text = "\n".join(lines)
    assert status == 1, text
    failures = _index(lines, " FAILURES ")
    own = _index(lines, "UserWarning: the code under test's own warning")
    grouped = _index(lines, "3 warnings from installed packages, one line per kind")
    short = _index(lines, " short test summary info ")
    assert failures < _index(lines, "seeded red") < own < grouped < short, text
    assert "warnings summary" in lines[_index(lines, "test_noise.py::test_red") - 1], text
    assert lines[grouped + 1].startswith(f"3x UserWarning from megatron.core.fusions: {APEX[:20]}"), text
    assert lines[grouped + 2] == FULL_LIST, text
    assert megatron not in text, "the grouped warning is also in pytest's summary"
    assert any(line.startswith("FAILED ") and "test_red" in line for line in lines[short:]), text
    assert any("seeded skip reason" in line for line in lines[short:]), text
    assert "1 failed, 1 passed, 1 skipped, 4 warnings" in lines[-1], "pytest's final line counts every warning"


def test_all_warnings_gives_pytests_full_summary_back(tmp_path: Path) -> None:
    status, lines, megatron = _session(tmp_path, ALL_WARNINGS)
    text = "\n".join(lines)
    assert status == 1, text
    assert "warnings from installed packages" not in text and FULL_LIST not in text, text
    summary = lines[_index(lines, " warnings summary ") :]
    assert any(megatron in line and APEX in line for line in summary), text
    assert any("the code under test's own warning" in line for line in summary), text
    assert "4 warnings" in lines[-1], text


def test_disable_warnings_shows_no_warnings_grouped_either(tmp_path: Path) -> None:
    status, lines, _ = _session(tmp_path, "--disable-warnings")
    text = "\n".join(lines)
    assert status == 1 and "seeded red" in text, text
    assert "warnings from installed packages" not in text and " warnings summary " not in text, text


def test_a_rank_writes_installed_packages_warnings_to_its_file_and_prints_the_rest(
    ownership: Ownership, tmp_path: Path
) -> None:
    installed = str(ownership.installed[0] / "megatron" / "core" / "models" / "backends.py")
    subject = str(tmp_path / "checkout" / "modernrl" / "grad_chunking.py")
    directory = tmp_path / "warnings"
    directory.mkdir()
    printed: list[str] = []
    shown = warnings.showwarning
    try:
        warnings.showwarning = lambda message, *rest: printed.append(str(message))
        divert_rank_warnings(ownership, str(directory), 1, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn_explicit("Apex is not installed.", UserWarning, installed, 10)
            warnings.warn_explicit("the subject's own", UserWarning, subject, 3)
    finally:
        warnings.showwarning = shown
    assert rank_warnings(directory) == [("UserWarning", "Apex is not installed.", installed)]
    assert printed == ["the subject's own"]


def test_a_half_written_line_of_a_killed_rank_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "rank0-1.jsonl").write_text('["UserWarning", "Apex", "/v/site-packages/megatron/a.py"]\n["UserW')
    assert rank_warnings(tmp_path) == [("UserWarning", "Apex", "/v/site-packages/megatron/a.py")]


def test_a_kind_seen_in_an_installed_package_and_in_a_file_of_none_is_one_line() -> None:
    [line, _] = grouped_lines([("UserWarning", "x", "megatron.core"), ("UserWarning", "x", "preload.py")], 80)
    assert line == "2x UserWarning from megatron, preload: x"
