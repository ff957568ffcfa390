"""The warm run of several subjects (``harness.plugin.warm_sessions``): its command, its folders, its exit status, and
the one fork server every subject's ranks come from."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness import REPO_ROOT
from harness.plugin.command import WARM_SESSIONS, case_command, several_subjects, subject_folder
from harness.plugin.warm_sessions import may_need_ranks, overall_status


@pytest.mark.parametrize(
    ("statuses", "overall"),
    [([0, 0], 0), ([0, 1, 0], 1), ([1, 1], 1), ([0, 4, 1], 4), ([1, -9], 137), ([2, 3], 2)],
)
def test_a_broken_session_is_never_read_as_a_red_verdict(statuses: list[int], overall: int) -> None:
    assert overall_status(statuses) == overall


def test_each_subject_has_a_folder_of_its_own(tmp_path: Path) -> None:
    folders = [
        subject_folder(tmp_path, 1, "/a/pyproject.toml"),
        subject_folder(tmp_path, 2, "/b/pyproject.toml"),
        subject_folder(tmp_path, 3, "harness.reference"),
        subject_folder(tmp_path, 4, "seeded/chunk splitting.py"),
    ]
    assert [folder.name for folder in folders] == [
        "1-pyproject",
        "2-pyproject",
        "3-harness.reference",
        "4-chunk_splitting",
    ]


def test_the_fork_server_starts_only_for_a_selection_that_can_run_on_ranks() -> None:
    assert not may_need_ranks([str(REPO_ROOT / "cases" / "test_chunk_splitting.py"), "-q"])
    assert may_need_ranks([str(REPO_ROOT / "cases" / "test_equivalence.py") + "::test_reduces_with_upstreams_ops"])
    assert may_need_ranks([str(REPO_ROOT / "cases")])
    assert may_need_ranks([])
    command = case_command("megatron-0.15", Path("/tmp/r"), ["cases/test_chunk_splitting.py"], subjects=["a", "b"])
    assert not may_need_ranks(command[command.index("--") + 1 :]), "the case command's own option values select nothing"
    command = case_command("megatron-0.15", Path("/tmp/r"), ["cases"], subjects=["a", "b"])
    assert may_need_ranks(command[command.index("--") + 1 :])


def test_several_subjects_make_a_warm_run_and_one_subject_a_warm_session(tmp_path: Path) -> None:
    warm = case_command("megatron-0.15", tmp_path, ["cases"], subjects=["a.py", "b.toml"])
    assert warm[1:3] == ["-m", WARM_SESSIONS] and several_subjects(warm)
    split = warm.index("--")
    assert warm[3:split] == [f"--report-dir={tmp_path}", "--subject=a.py", "--subject=b.toml"]
    assert not any(part.startswith(("--junitxml", "--subject", "--report-dir")) for part in warm[split:])
    one = case_command("megatron-0.15", tmp_path, ["cases"], subjects=["a.py"])
    assert one[1:4] == ["-m", WARM_SESSIONS, "--"] and not several_subjects(one)
    assert "--subject=a.py" in one and f"--junitxml={tmp_path / 'junit.xml'}" in one
    workers = case_command("megatron-0.15", tmp_path, ["cases"], workers="2", subjects=["a.py"])
    assert workers[1:3] == ["-m", "pytest"], "xdist workers import torch and Megatron themselves"
    mutated = case_command("megatron-0.15", tmp_path, ["cases"], subjects=["a.py"], mutations=tmp_path / "m.json")
    assert several_subjects(mutated) and f"--mutations={tmp_path / 'm.json'}" in mutated[: mutated.index("--")]


_FORKED_CHILD = textwrap.dedent(
    """
    import os, sys
    from harness.ranks import fork_server, pool
    from tests import rank_tasks

    fork_server.start_fork_server()
    server = fork_server.multiprocessing.forkserver._forkserver._forkserver_pid
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        if sys.argv[1] == "inherit":
            fork_server.inherit_fork_server()
        try:
            parents = pool.RankPool(2).run(rank_tasks.parent_pid)
            answer = "same" if parents == [server, server] else f"other {parents} {server}"
        except BaseException as err:
            answer = type(err).__name__
        os.write(write_end, answer.encode())
        pool.close_all_pools()
        os._exit(0)
    os.close(write_end)
    os.waitpid(child, 0)
    print(os.read(read_end, 4096).decode())
    """
)


@pytest.mark.parametrize(("how", "answer"), [("inherit", "same"), ("plain", "ChildProcessError")])
def test_a_forked_session_forks_its_ranks_from_the_server_already_running(how: str, answer: str) -> None:
    """Inherited, the server serves the forked child; left as multiprocessing has it, the child cannot use it."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-c", _FORKED_CHILD, how]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == answer, done.stderr[-3000:]


_SERVER_OF_THIS_PROCESS = textwrap.dedent(
    """
    import os, sys, time
    from harness.ranks import fork_server, pool
    from tests import rank_tasks

    rank_tasks.SET_BEFORE_THE_SERVER = "inherited"
    started = fork_server.fork_fork_server() if sys.argv[1] == "forked" else fork_server.start_fork_server()
    server = fork_server.multiprocessing.forkserver._forkserver._forkserver_pid
    parents = pool.RankPool(2).run(rank_tasks.parent_pid)
    seen = pool.RankPool(2).run(rank_tasks.module_attribute, "tests.rank_tasks", "SET_BEFORE_THE_SERVER")
    pool.close_all_pools()
    print(started, parents == [server, server], seen, server, flush=True)
    """
)


@pytest.mark.parametrize(("how", "seen"), [("forked", "['inherited', 'inherited']"), ("spawned", "[None, None]")])
def test_a_server_forked_from_this_process_gives_its_ranks_what_this_process_imported(how: str, seen: str) -> None:
    """Forked, the server's ranks find this process's modules as they are (torch and Megatron imported once, a
    mutant's modules in place); spawned, a fresh server imports its own. Either server leaves with this process."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-c", _SERVER_OF_THIS_PROCESS, how]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    started, same_server, *values, server = done.stdout.split()
    assert (started, same_server, " ".join(values)) == ("True", "True", seen), done.stdout
    for _ in range(100):
        if not Path(f"/proc/{server}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{server}").exists(), f"the fork server {server} outlived the process that started it"
