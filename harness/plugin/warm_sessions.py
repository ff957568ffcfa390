"""Several subjects on one target in one interpreter: torch and Megatron imported once, one forked session each.

A target session spends seconds of CPU before its first case: importing torch and Megatron in the session, then
again in the rank pools' fork server. Checking several subjects (the seeded breaks of a family, the before and after
of an upgrade pull request, the subject mutants of the sensitivity catalogue) one command each pays that every time.
Here one process imports both and starts the fork server once, then forks a complete pytest session per subject,
one after the other. Each child is the case command's session as it runs for one subject (the same plugins, options
and cases), with its own process state, so subjects stay as isolated as the families require; each writes its
``junit.xml``, ``summary.json``, the output it printed and its exit status into a folder of its own under the report
directory (:func:`harness.plugin.command.subject_folder`), so each gets its own report matrix. The rank pools of every
child fork their ranks from the one fork server (:func:`harness.ranks.pool.inherit_fork_server`).

The Megatron and torch modules a child sees were imported before it started, as they are in a one-subject session
once collection is done; pytest's own plugins and the harness's plugins are imported by each child itself, so that
pytest rewrites their asserts as in any session. The warnings of the imports made here are written where every
child's warnings summary counts them (:mod:`harness.plugin.warnings_summary`).

The exit status is 0 when every subject's session passed, 1 when every one ended in 0 or 1 and one failed, else the
first other status (a usage error, an internal error, a child killed by a signal) so that a broken run never reads as
a red verdict.

Run by :func:`harness.plugin.command.case_command` when it is given several subjects::

    python -m harness.plugin.warm_sessions --report-dir=DIR --subject=A --subject=B -- <case command's pytest args>
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

from harness.plugin.command import BROKEN_STATUS, OUTPUT_FILE, SUBJECT_STATUS_FILE, subject_folder
from harness.ranks.pool import (
    WARNINGS_ENV_VAR,
    close_all_pools,
    die_with_parent,
    inherit_fork_server,
    start_fork_server,
    warnings_to_file,
)
from harness.targets.megatron_names import FINALIZE_MODULE

WARM_MODULES = ("torch", "torch.distributed", "megatron.core", FINALIZE_MODULE)
"""What every subject's session would import first: imported once here. Not pytest's plugins or the harness's:
pytest must import those itself to rewrite their asserts."""
SHARED_WARNINGS_MARK = "warm-run"
"""A file in the warnings directory of a warm run: the directories of its subjects' sessions lie inside it, and the
warnings of the imports made once (here and in the fork server) lie in it, counted by every subject's summary."""


_VALUE_OPTIONS = frozenset({"-c", "--rootdir", "-p", "-n", "--dist", "-k", "-m", "--deselect", "--ignore"})
"""The case command's options (and pytest's selecting ones) whose value is the next argument, never a selection."""


def overall_status(statuses: Sequence[int]) -> int:
    """0 when every session passed; 1 when each ended in 0 or 1; else the first status that is neither (a signal
    ``N``, reported by ``waitpid`` as ``-N``, as the shell's ``128 + N``)."""
    broken = [status for status in statuses if status not in (0, 1)]
    if broken:
        return broken[0] if broken[0] > 0 else 128 - broken[0]
    return 1 if 1 in statuses else 0


def may_need_ranks(pytest_args: Sequence[str]) -> bool:
    """Whether the selection among ``pytest_args`` can hold a case on ranks: a folder, or a case file that marks
    one. Starting the fork server costs seconds of CPU on another core; a run of chunk-splitting cases alone need not
    pay them. An argument that names no file or folder is no selection; where nothing is selected, pytest runs its
    default, which may."""
    paths, items = [], iter(pytest_args)
    for part in items:
        if part in _VALUE_OPTIONS:
            next(items, None)
        elif not part.startswith("-") and Path(part.split("::", 1)[0]).exists():
            paths.append(Path(part.split("::", 1)[0]))
    if not paths:
        return True
    for path in paths:
        if path.is_dir():
            return True
        with contextlib.suppress(OSError):
            if "ON_RANKS" in path.read_text():
                return True
    return False


def _import_warm_modules(directory: Path) -> None:
    """Import :data:`WARM_MODULES`, their warnings written to ``directory`` for the subjects' summaries."""
    with warnings_to_file(directory / f"warm-{os.getpid()}.jsonl"):
        for name in WARM_MODULES:
            with contextlib.suppress(Exception):
                # A Megatron that cannot be imported is each subject's blocker, named by its own session.
                importlib.import_module(name)


def _run_child(arguments: list[str], folder: Path, read_end: int, write_end: int) -> None:
    """In the forked child: its output to the pipe, its warnings to its own folder, the session run, and out; it
    never returns into the parent's loop, and dies with the warm process (a run killed for its timeout)."""
    status = BROKEN_STATUS
    try:
        os.close(read_end)
        die_with_parent(os.getppid())
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        shared = Path(os.environ[WARNINGS_ENV_VAR])
        own = shared / f"{folder.name}-{os.getpid()}"
        own.mkdir()
        os.environ[WARNINGS_ENV_VAR] = str(own)
        inherit_fork_server()
        import pytest

        status = int(pytest.main(arguments))
        close_all_pools()
    except BaseException:
        traceback.print_exc()
    finally:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)


def _tee(read_end: int, log: Path) -> None:
    """Everything the child prints, to this process's stdout and to the subject's log, until the child is done."""
    with log.open("wb") as out:
        while chunk := os.read(read_end, 65536):
            out.write(chunk)
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
    os.close(read_end)


def run_subjects(report_dir: Path, subjects: Sequence[str], pytest_args: Sequence[str]) -> int:
    """One session per subject, forked from this warm process; the overall exit status."""
    report_dir.mkdir(parents=True, exist_ok=True)
    # A directory of this run's own: inside the one the environment names, if any (its owner keeps it), else a
    # temporary one removed at the end; another run's warnings never count here.
    inherited = os.environ.get(WARNINGS_ENV_VAR)
    directory = Path(tempfile.mkdtemp(prefix="warm-run-", dir=inherited))
    os.environ[WARNINGS_ENV_VAR] = str(directory)
    (directory / SHARED_WARNINGS_MARK).touch()
    ranks = may_need_ranks(pytest_args)
    if ranks:
        start_fork_server()  # its imports run on another core beside this process's own
    _import_warm_modules(directory)
    statuses = []
    for index, spec in enumerate(subjects, 1):
        folder = subject_folder(report_dir, index, spec)
        shutil.rmtree(folder, ignore_errors=True)  # what an earlier run left is never read as this one's
        folder.mkdir(parents=True)
        if ranks:
            start_fork_server()  # here, its parent, a server that died is seen and replaced
        arguments = [*pytest_args, f"--subject={spec}", f"--junitxml={folder / 'junit.xml'}", f"--report-dir={folder}"]
        print(f"==== subject {index} of {len(subjects)}: {spec} (reports in {folder}) ====", flush=True)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            _run_child(arguments, folder, read_end, write_end)
        os.close(write_end)
        _tee(read_end, folder / OUTPUT_FILE)
        _, wait_status = os.waitpid(pid, 0)
        statuses.append(os.waitstatus_to_exitcode(wait_status))
        (folder / SUBJECT_STATUS_FILE).write_text(f"{statuses[-1]}\n")
    if inherited is None:
        shutil.rmtree(directory, ignore_errors=True)
    return overall_status(statuses)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.plugin.warm_sessions", description=__doc__.split("\n")[0])
    parser.add_argument("--report-dir", type=Path, required=True, help="where each subject's folder goes")
    parser.add_argument("--subject", action="append", required=True, help="a subject; repeat for each")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the case command's pytest arguments")
    options = parser.parse_args(argv)
    pytest_args = options.pytest_args[1:] if options.pytest_args[:1] == ["--"] else options.pytest_args
    return run_subjects(options.report_dir, options.subject, pytest_args)


if __name__ == "__main__":
    _status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Python's teardown of torch's and Megatron's modules would take 1-2 s more and do nothing for the gate; only
    # multiprocessing's own exit work (the fork server's socket directory) is done first.
    multiprocessing.util._exit_function()
    os._exit(_status)
