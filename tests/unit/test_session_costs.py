"""What a target session pays once: the fork server started as soon as collection finds a case on ranks, and a
finished session leaving without the interpreter's teardown, with its own exit status and nothing of its end lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import REPO_ROOT
from harness.contracts.import_side_effects.import_time import ImportTimeError, measure_import_times
from harness.ranks import early_start, preload

CASES = """
    import atexit
    import pathlib
    import sys

    import pytest

    atexit.register(lambda: pathlib.Path(sys.argv[-1] + ".exited").write_text("ran"))

    def test_passes():
        assert True

    @pytest.mark.skipif("{verdict}" != "red", reason="green run")
    def test_fails():
        assert False, "seeded red"
"""


def _run_session(tmp_path: Path, verdict: str, *options: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    cases = tmp_path / f"test_{verdict}.py"
    cases.write_text(textwrap.dedent(CASES.format(verdict=verdict)))
    command = [sys.executable, "-m", "pytest", "-p", "harness.plugin.quick_exit", "-p", "no:cacheprovider"]
    completed = subprocess.run(
        [*command, "--rootdir", str(tmp_path), *options, str(cases)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return completed, Path(f"{cases}.exited")


@pytest.mark.parametrize(
    ("verdict", "status", "summary"), [("green", 0, "1 passed, 1 skipped"), ("red", 1, "1 failed")]
)
def test_a_finished_session_leaves_with_its_status_and_all_its_output(
    tmp_path: Path, verdict: str, status: int, summary: str
) -> None:
    completed, exited = _run_session(tmp_path, verdict)
    assert completed.returncode == status, completed.stdout[-2000:] + completed.stderr[-2000:]
    assert summary in completed.stdout.splitlines()[-1], "the last line of the session's output was lost"
    assert exited.read_text() == "ran", "an exit function registered after the plugin did not run"


def test_a_session_that_selects_nothing_keeps_pytests_status(tmp_path: Path) -> None:
    completed, _ = _run_session(tmp_path, "green", "-k", "no_such_case")
    assert completed.returncode == pytest.ExitCode.NO_TESTS_COLLECTED


def _item(*groups: str) -> SimpleNamespace:
    marks = [SimpleNamespace(args=(group,)) for group in groups]
    return SimpleNamespace(iter_markers=lambda name: marks if name == "xdist_group" else [])


def _config(worker: bool = False) -> SimpleNamespace:
    return SimpleNamespace(workerinput={}) if worker else SimpleNamespace()


@pytest.mark.parametrize(
    ("items", "worker", "started"),
    [
        ([_item(), _item(early_start.RANKS_GROUP)], False, True),
        ([_item(), _item("another-group")], False, False),
        ([_item(early_start.RANKS_GROUP)], True, False),
    ],
    ids=["a-case-on-ranks", "no-case-on-ranks", "xdist-worker"],
)
def test_the_fork_server_starts_once_collection_finds_a_case_on_ranks(
    monkeypatch: pytest.MonkeyPatch, items: list[SimpleNamespace], worker: bool, started: bool
) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(early_start, "start_fork_server", lambda: calls.append(True) or True)
    early_start.pytest_collection_modifyitems(_config(worker), items)
    assert calls == ([True] if started else [])


def test_megatron_is_timed_only_where_the_fork_server_imports_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not preload._preloaded_by_the_fork_server()
    monkeypatch.setitem(sys.modules, "megatron.core", SimpleNamespace())
    assert preload._time_first_megatron_import() is None, "timed an import that had already happened"


def test_without_megatron_the_import_time_is_not_measured_and_says_why() -> None:
    if "megatron.core" in sys.modules or preload.MEGATRON_IMPORT_NS is not None:
        pytest.skip("this interpreter has Megatron; the harness's own venv has none")
    with pytest.raises(ImportTimeError, match=r"megatron\.core was not imported fresh by the fork server"):
        measure_import_times(REPO_ROOT / "harness", "reference")
