"""The tests' warm runs forked by a warm server: the run is the command's own (status, output, environment, working
directory), the environment keys the server, a run past its timeout is killed, and a server that goes away loses the
run loudly. The server here is this interpreter (torch without Megatron: the warm imports it cannot make are each
session's to report); each run is a small pytest session of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.plugin.command import WARM_SESSIONS
from harness.plugin.warm_client import WarmServerError, run_warm
from harness.ranks.fork_server import alive

_CASES = """
import json, os, signal, time
from pathlib import Path

def test_records_where_it_runs():
    record = {"cwd": os.getcwd(), "mark": os.environ.get("MC_MARK"), "parent": os.getppid(), "pid": os.getpid()}
    Path(__file__).with_name("record.json").write_text(json.dumps(record))
    print("RECORDED", flush=True)
    action = Path(__file__).with_name("action").read_text()
    if action == "sleep":
        time.sleep(300)
    elif action == "kill-self":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "kill-server":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(300)

def test_fails():
    assert Path(__file__).with_name("action").read_text() != "fail"
"""


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    path = tmp_path / "test_served.py"
    path.write_text(_CASES)
    return path


def _command(cases: Path) -> list[str]:
    return [sys.executable, "-m", WARM_SESSIONS, "--", "-p", "no:cacheprovider", "-q", "-s", str(cases)]


def _env(tmp_path: Path, action: str = "", **extra: str) -> dict[str, str]:
    """The environment of a run whose cases do ``action``; both are files beside the cases, the environment keying
    the server."""
    (tmp_path / "action").write_text(action)
    return {**os.environ, **extra}


def _record(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "record.json").read_text())


def test_a_served_run_is_the_command_run_fresh(cases: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, "fail", MC_MARK="fresh")
    fresh = subprocess.run(_command(cases), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    served = run_warm(_command(cases), {**env, "MC_MARK": "served"}, 300)
    assert (served.returncode, fresh.returncode) == (1, 1), served.stdout[-2000:]
    for run in (fresh, served):
        assert "RECORDED" in run.stdout and "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
    record = _record(tmp_path)
    assert record["cwd"] == str(REPO_ROOT) and record["mark"] == "served", record


def test_the_environment_keys_the_server_and_the_test_name_does_not(cases: Path, tmp_path: Path) -> None:
    servers = []
    for env in (
        _env(tmp_path, MC_MARK="a"),
        _env(tmp_path, MC_MARK="a", PYTEST_CURRENT_TEST="another test (call)"),
        _env(tmp_path, MC_MARK="b"),
    ):
        assert run_warm(_command(cases), env, 300).returncode == 0
        servers.append(_record(tmp_path)["parent"])
        assert _record(tmp_path)["mark"] == env["MC_MARK"]
    assert servers[0] == servers[1] != servers[2], servers


def test_a_run_past_its_timeout_is_killed_and_the_server_serves_the_next(cases: Path, tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        run_warm(_command(cases), _env(tmp_path, "sleep"), 6)
    assert "RECORDED" in str(timed_out.value.output)
    killed = _record(tmp_path)
    deadline = time.monotonic() + 10
    while alive(killed["pid"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(killed["pid"]), "the run outlived its timeout"
    assert run_warm(_command(cases), _env(tmp_path), 300).returncode == 0
    assert _record(tmp_path)["parent"] == killed["parent"], "the server did not serve the next run"


def test_a_run_killed_by_a_signal_ends_as_subprocess_says_it(cases: Path, tmp_path: Path) -> None:
    assert run_warm(_command(cases), _env(tmp_path, "kill-self"), 300).returncode == -signal.SIGKILL


def test_a_server_that_goes_away_loses_the_run_loudly_and_the_next_run_gets_a_new_one(
    cases: Path, tmp_path: Path
) -> None:
    with pytest.raises(WarmServerError, match="went away"):
        run_warm(_command(cases), _env(tmp_path, "kill-server"), 120)
    lost = _record(tmp_path)["parent"]
    assert run_warm(_command(cases), _env(tmp_path), 300).returncode == 0
    assert _record(tmp_path)["parent"] != lost


def test_a_command_that_is_no_warm_run_is_run_as_it_is(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import os; print(os.environ['MC_MARK']); raise SystemExit(3)"]
    ran = run_warm(command, _env(tmp_path, MC_MARK="plain"), 60)
    assert (ran.returncode, ran.stdout) == (3, "plain\n")
