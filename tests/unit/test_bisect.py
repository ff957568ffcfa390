"""The bisect's search on a small fake index: a folder of megatron-core builds, some red, some green, one that does
not install, uploaded in an order their dev numbers do not follow. Each step installs its build with pip from the
folder (a real install: the broken build really fails) and judges it by the signature it finds, the way a gate step
reads a call that no longer binds. The ordering, the skips, the cache, the diff, the report and each error of bad
input are checked here; the gate's own step (nested nox) is :mod:`harness.bisect.gate_step`, proven on the real
nightly builds (docs/bisect.md)."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bisect.gate_step import _install_reason
from harness.bisect.report import bisect_section, render_html, render_markdown
from harness.bisect.run import BisectError, Request, parse_request, run_bisect
from harness.bisect.search import GREEN, RED, SKIPPED, StepVerdict, search
from harness.bisect.symbol_diff import enclosing
from harness.targets.index_builds import Build, BuildIndexError, index_builds, main_line, newest_for
from tests.fake_index import CALLER_NEW, CALLER_OLD, NEW, OLD, broken_sdist, wheel

CASE = "cases/test_api_fingerprint.py::test_megatrons_calls_bind_to_the_replacements"
# (version, upload order, widget source, caller source); None: a source distribution whose build fails.
BUILDS = [
    ("0.15.3", 9, OLD, CALLER_OLD),
    ("0.15.4", 10, OLD, CALLER_OLD),
    ("0.16.0rc0.dev900", 1, OLD, CALLER_OLD),
    ("0.16.0rc0.dev100", 2, OLD, CALLER_OLD),
    ("0.16.0rc0.dev700", 3, None, None),
    ("0.16.0rc0.dev300", 4, NEW, CALLER_NEW),
    ("0.16.0rc0.dev200", 5, NEW, CALLER_NEW),
    ("0.16.0rc0.dev800", 6, NEW, CALLER_NEW),
    ("0.16.0", 11, NEW, CALLER_NEW),
]
FIRST_RED = "0.16.0rc0.dev300"


def replacement(x, factor):
    """What a framework wrote against 0.15.3's ``scale``."""
    return x * factor


@pytest.fixture
def fake_index(tmp_path: Path) -> Path:
    folder = tmp_path / "index"
    folder.mkdir()
    for version, order, widget, caller in BUILDS:
        if widget is None:
            path = broken_sdist(folder, version)
        else:
            files = {"megatron/__init__.py": "", "megatron/core/__init__.py": ""}
            files |= {"megatron/core/widget.py": widget, "megatron/core/caller.py": caller}
            path = wheel(folder, version, files)
        os.utime(path, (1_700_000_000 + order * 86_400,) * 2)
    return folder


class PipStep:
    """Installs each build from the fake index with pip, then judges it: red where the call in ``caller.py`` does not
    bind to the replacement written against 0.15.3 (``scale(x, factor)``)."""

    def __init__(self, index: Path, workdir: Path) -> None:
        self.index, self.workdir, self.runs = index, workdir, []

    def __call__(self, build: Build, selection: list[str]) -> StepVerdict:
        self.runs.append(build.version)
        target = self.workdir / build.version
        command = [sys.executable, "-m", "pip", "install", "--isolated", "--quiet", "--no-index", "--no-deps"]
        command += ["--find-links", str(self.index), "--target", str(target), f"megatron-core=={build.version}"]
        completed = subprocess.run(command, capture_output=True, text=True)
        if completed.returncode != 0:
            last = (completed.stderr.strip().splitlines() or ["pip failed"])[-1]
            return StepVerdict(SKIPPED, reason=f"did not install: {last}")
        caller = ast.parse((target / "megatron" / "core" / "caller.py").read_text())
        call = next(n for n in ast.walk(caller) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "scale")
        try:
            inspect.signature(replacement).bind(*call.args, **{k.arg: k.value for k in call.keywords})
        except TypeError:
            details = {
                "symbols": ["megatron.core.widget:scale"],
                "call_sites": [f"megatron/core/caller.py:{call.lineno}"],
            }
            return StepVerdict(RED, red=(CASE,), details=details)
        return StepVerdict(GREEN)


def _bisect(index: Path, tmp_path: Path, step: PipStep, **request) -> tuple:
    said: list[str] = []
    arguments = {"good": "0.15.3", "bad": "0.16.0", "index": str(index), **request}
    result = run_bisect(Request(**arguments), step, "subject.toml", said.append, cache=tmp_path / "cache")
    return result, said


def test_main_line_follows_upload_order_and_leaves_patch_releases_out(fake_index: Path) -> None:
    builds = index_builds(str(fake_index))
    by_version = {b.version: b for b in builds}
    line, left_out = main_line(builds, by_version["0.15.3"], by_version["0.16.0"])
    expected = ["0.15.3", "0.16.0rc0.dev900", "0.16.0rc0.dev100", "0.16.0rc0.dev700", "0.16.0rc0.dev300"]
    assert [b.version for b in line] == [*expected, "0.16.0rc0.dev200", "0.16.0rc0.dev800", "0.16.0"]
    assert [b.version for b in left_out] == ["0.15.4"]
    assert newest_for(builds, "3.11").version == "0.16.0"


def test_bisect_names_the_first_red_build_and_steps_around_one_that_does_not_install(
    fake_index: Path, tmp_path: Path
) -> None:
    step = PipStep(fake_index, tmp_path / "venvs")
    result, said = _bisect(fake_index, tmp_path, step)
    assert result.outcome.last_green.version == "0.16.0rc0.dev100"
    assert result.outcome.first_red.version == FIRST_RED
    assert result.outcome.stopped == "untestable", "the first red is the build that did not install, or the next"
    assert [b.version for b in result.outcome.between] == ["0.16.0rc0.dev700"]
    assert result.selection == (CASE,)
    skipped = [s for s in result.outcome.steps if s.verdict.status == SKIPPED]
    assert [s.build.version for s in skipped] == ["0.16.0rc0.dev700"]
    assert "did not install" in skipped[0].verdict.reason
    assert any("skipped: did not install" in line for line in said)
    assert any(line.startswith("bisect step 1 ") for line in said)
    assert "left out as releases of a release branch, not main: 0.15.4" in said[0]
    [diff] = [d for d in result.diffs if d.role == "replaced symbol"]
    assert "-def scale(x, factor):" in diff.diff and "+def scale(x, factor, bias=0):" in diff.diff
    [call] = [d for d in result.diffs if d.role.startswith("call site")]
    assert "+    return scale(x, 2, bias=1)" in call.diff
    section = bisect_section(result)
    markdown, page = render_markdown([section]), render_html([section], section.title)
    assert f"first red: megatron-core {FIRST_RED}" in markdown and "<details>" in markdown
    assert f"first red: megatron-core {FIRST_RED}" in page and '<details class="section">' in page


def test_a_second_bisect_reads_every_verdict_from_the_cache(fake_index: Path, tmp_path: Path) -> None:
    first = PipStep(fake_index, tmp_path / "venvs")
    _bisect(fake_index, tmp_path, first)
    second = PipStep(fake_index, tmp_path / "venvs2")
    result, said = _bisect(fake_index, tmp_path, second)
    assert second.runs == ["0.16.0rc0.dev700"], "only the build that did not install is tried again"
    assert result.outcome.first_red.version == FIRST_RED
    assert sum("from the cache" in line for line in said) == len(first.runs) - 1


def test_the_step_bound_stops_the_search_with_builds_left_between(fake_index: Path, tmp_path: Path) -> None:
    result, _ = _bisect(fake_index, tmp_path, PipStep(fake_index, tmp_path / "venvs"), max_steps=1)
    assert result.outcome.stopped == "bounded"
    assert len(result.outcome.steps) == 1 and result.outcome.between


def test_between_two_nightly_builds_history_is_their_upload_order(fake_index: Path) -> None:
    builds = {b.version: b for b in index_builds(str(fake_index))}
    line, _ = main_line(list(builds.values()), builds["0.16.0rc0.dev100"], builds["0.16.0rc0.dev300"])
    assert [b.version for b in line] == ["0.16.0rc0.dev100", "0.16.0rc0.dev700", "0.16.0rc0.dev300"]
    with pytest.raises(BuildIndexError, match=r"good 0\.16\.0rc0\.dev300 is not older than bad 0\.16\.0rc0\.dev100"):
        main_line(list(builds.values()), builds["0.16.0rc0.dev300"], builds["0.16.0rc0.dev100"])


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"good": "0.15.9"}, "megatron-core 0.15.9 is not on the index"),
        ({"good": "0.16.0", "bad": "0.15.3"}, "good 0.16.0 is not older than bad 0.15.3"),
        ({"good": "0.16.0rc0.dev300", "cases": (CASE,)}, "good 0.16.0rc0.dev300 is red on " + CASE),
        ({"bad": "0.16.0rc0.dev100"}, "bad 0.16.0rc0.dev100 is green: nothing to search for"),
        ({"cases": ("cases/test_api_fingerprint.py::test_declared_symbols_exist",)}, "is not red on bad 0.16.0"),
        ({"good": "0.16.0rc0.dev700"}, "good 0.16.0rc0.dev700 could not be run: did not install"),
    ],
)
def test_bad_input_is_one_line(fake_index: Path, tmp_path: Path, request_: dict, message: str) -> None:
    with pytest.raises(BisectError, match=message.replace("[", r"\[").replace(".", r"\.")) as raised:
        _bisect(fake_index, tmp_path, PipStep(fake_index, tmp_path / "venvs"), **request_)
    assert "\n" not in str(raised.value)


def test_a_case_named_by_its_function_matches_its_parametrized_reds(fake_index: Path, tmp_path: Path) -> None:
    result, _ = _bisect(fake_index, tmp_path, PipStep(fake_index, tmp_path / "venvs"), cases=(CASE,))
    assert result.outcome.first_red.version == FIRST_RED


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["0.15.3"], "name a good and a bad version"),
        (["0.15.3", "0.16.0", "--max-steps", "zero"], "--max-steps takes a whole number"),
        (["0.15.3", "0.16.0", "--steps=3"], "unknown option --steps=3"),
        (["0.15.3", "0.16.0", "--index"], "--index needs a value"),
    ],
)
def test_the_command_line_refuses_what_it_cannot_use(arguments: list[str], message: str) -> None:
    with pytest.raises(BisectError, match=message):
        parse_request(arguments)


def test_the_command_line_reads_cases_and_options() -> None:
    request = parse_request(["0.15.3", "megatron-core==0.16.0", CASE, "--max-steps=4", "--index", "/srv/index"])
    assert request == Request("0.15.3", "0.16.0", (CASE,), 4, "/srv/index")


def test_the_search_narrows_a_long_line_in_logarithmic_steps() -> None:
    line = [Build(f"0.16.0rc0.dev{i}", None, ()) for i in range(1, 301)]
    first_red = 137
    verdicts = []

    def judge(build: Build) -> StepVerdict:
        verdicts.append(build.version)
        return StepVerdict(RED if int(build.version.rsplit("dev", 1)[1]) >= first_red else GREEN)

    outcome = search(line, judge)
    assert outcome.first_red.version == f"0.16.0rc0.dev{first_red}"
    assert outcome.last_green.version == f"0.16.0rc0.dev{first_red - 1}"
    assert len(verdicts) <= 9 and outcome.stopped == "adjacent"


def test_a_call_site_is_read_as_the_function_around_it(tmp_path: Path) -> None:
    (tmp_path / "megatron" / "core").mkdir(parents=True)
    (tmp_path / "megatron" / "core" / "caller.py").write_text(CALLER_NEW)
    assert enclosing(tmp_path, "megatron/core/caller.py:5") == ("megatron.core.caller", "step")
    assert enclosing(tmp_path, "megatron/core/caller.py:1") is None


def test_a_build_that_fails_is_said_in_uvs_words(fake_index: Path, tmp_path: Path) -> None:
    """The reason a step gives for a build that did not install is read from the install's real output: uv building
    the fake index's broken source distribution, inside the lines nox writes around it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "uv", "venv", "-q", str(venv)], check=True)
    command = [sys.executable, "-m", "uv", "pip", "install", "-p", str(venv / "bin" / "python"), "--no-index"]
    command += ["--find-links", str(fake_index), "megatron-core==0.16.0rc0.dev700"]
    environment = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "NO_COLOR": "1"}
    failed = subprocess.run(command, capture_output=True, text=True, env=environment)
    assert failed.returncode != 0
    log = tmp_path / "step.log"
    log.write_text(
        f"$ nox -s megatron-bisect --install-only\nnox > uv pip install ...\n{failed.stderr}\nnox > Session failed.\n"
    )
    reason = _install_reason(log)
    assert reason.startswith("error: Failed to build `megatron-core==0.16.0rc0.dev700`"), reason
    assert reason.endswith("this build needs a compiler it cannot find"), reason
