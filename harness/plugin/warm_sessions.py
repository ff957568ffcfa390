"""Cases on one target in an interpreter that imported torch and Megatron once: for one subject, or one forked
session per subject.

A target session spends seconds of CPU before its first case: importing torch and Megatron in the session, then
again in the rank pools' fork server. Here one process imports both, times Megatron's first import (the
import-side-effects family's import-time case compares an adapter with it, :mod:`harness.ranks.preload`) and forks
the fork server from itself (:func:`harness.ranks.fork_server.fork_fork_server`), so the server's ranks inherit the
imports instead of paying them again.

Given no subject of its own, it then runs the case command's session in this very process: the one-subject session
of a target, whose pytest arguments say where its reports go. Given several (the seeded breaks of a family, the
before and after of an upgrade pull request, the subject mutants of the sensitivity catalogue), it forks one complete
pytest session per subject, one after the other. Each child is the case command's session as it runs for one
subject (the same plugins, options and cases), with its own process state, so subjects stay as isolated as the
families require; each writes its ``junit.xml``, ``summary.json``, the output it printed and its exit status into a
folder of its own under the report directory (:func:`harness.plugin.command.subject_folder`), so each gets its own
report matrix. The rank pools of every child fork their ranks from the one fork server
(:func:`harness.ranks.fork_server.inherit_fork_server`).

A subject may come with a Megatron mutant (``--mutations``, written by the sensitivity runner): its child imports
Megatron again with the mutant's edited files (:mod:`harness.targets.in_place_mutant`) and forks a fork server of its
own from there, so its ranks run the mutant too; no package is copied and nothing is imported twice.

The Megatron and torch modules a session sees were imported before it started, as they are in a plain session once
collection is done; pytest's own plugins and the harness's plugins are imported by the session itself, so that
pytest rewrites their asserts as in any session. The warnings of the imports made here are written where every
session's warnings summary counts them (:mod:`harness.plugin.warnings_summary`).

The exit status of several subjects is 0 when every subject's session passed, 1 when every one ended in 0 or 1 and
one failed, else the first other status (a usage error, an internal error, a child killed by a signal) so that a
broken run never reads as a red verdict. One session's is its own.

Run by :func:`harness.plugin.command.case_command`::

    python -m harness.plugin.warm_sessions -- <case command's pytest arguments, its reports and subject included>
    python -m harness.plugin.warm_sessions --report-dir=DIR --subject=A --subject=B [--mutations=FILE] -- <arguments>
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import logging
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.plugin.command import BROKEN_STATUS, OUTPUT_FILE, SUBJECT_STATUS_FILE, subject_folder
from harness.ranks.fork_server import die_with_parent, fork_fork_server, inherit_fork_server, start_fork_server
from harness.ranks.pool import close_all_pools
from harness.ranks.rank_warnings import WARNINGS_ENV_VAR, warnings_to_file
from harness.targets.megatron_names import FINALIZE_MODULE

WARM_MODULES = ("harness.ranks.preload", "torch", "torch.distributed", "megatron.core", FINALIZE_MODULE)
"""What every session would import first, and its ranks: imported once here, ``megatron.core`` timed by the first
(torch included, in this fresh interpreter). Not pytest's plugins or the harness's cases: pytest must import those
itself to rewrite their asserts."""
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


_served_imports: Path | None = None
"""Where a warm server (:mod:`harness.plugin.warm_server`) wrote the warnings of the imports it made before forking
this process; ``None`` in a warm run started fresh."""


def _import_warm_modules(directory: Path) -> Path:
    """Import :data:`WARM_MODULES`, their warnings written to a file in ``directory`` for the subjects' summaries;
    in a child of a warm server, which imported them, the server's warnings are copied there instead; returns that
    file."""
    if _served_imports is not None:
        return Path(shutil.copyfile(_served_imports, directory / _served_imports.name))
    path = directory / f"warm-{os.getpid()}.jsonl"
    path.touch()
    with warnings_to_file(path):
        for name in WARM_MODULES:
            with contextlib.suppress(Exception):
                # A Megatron that cannot be imported is each subject's blocker, named by its own session.
                importlib.import_module(name)
    return path


def import_for_server(directory: Path) -> None:
    """A warm server's imports, made once, their warnings written to ``directory``; every warm run it forks counts
    them as its own."""
    global _served_imports
    _served_imports = _import_warm_modules(directory)


def leave(status: int) -> None:
    """End this process with ``status``, its output flushed. Python's teardown of torch's and Megatron's modules
    would take 1-2 s more and do nothing for the gate; only multiprocessing's own exit work (the fork server's socket
    directory) is done first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    multiprocessing.util._exit_function()
    os._exit(status)


def _own_warnings(name: str) -> None:
    """A session's own warnings directory, inside the run's, where its summary also counts the run's imports."""
    own = Path(os.environ[WARNINGS_ENV_VAR]) / f"{name}-{os.getpid()}"
    own.mkdir()
    os.environ[WARNINGS_ENV_VAR] = str(own)


def _run_session(arguments: list[str]) -> int:
    """The case command's pytest session, here; its rank pools closed before the process leaves without them."""
    import pytest

    status = int(pytest.main(arguments))
    close_all_pools()
    return status


def _run_child(
    arguments: list[str], folder: Path, read_end: int, write_end: int, mutation: dict[str, Any] | None, ranks: bool
) -> None:
    """In the forked child: its output to the pipe, its warnings to its own folder, its Megatron mutant (if any)
    imported with a fork server of its own, the session run, and out; it never returns into the parent's loop, and
    dies with the warm process (a run killed for its timeout)."""
    status = BROKEN_STATUS
    try:
        os.close(read_end)
        die_with_parent(os.getppid())
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        _own_warnings(folder.name)
        if mutation is None:
            inherit_fork_server()
        else:
            from harness.targets.in_place_mutant import apply_in_place

            apply_in_place(str(mutation["id"]), mutation["sources"])
            if ranks:
                fork_fork_server()
        status = _run_session(arguments)
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


@contextlib.contextmanager
def _warm_run(pytest_args: Sequence[str], server: bool) -> Iterator[bool]:
    """The run's warnings directory, the warm imports, and (with ``server``, where the selection may need ranks) the
    fork server forked from them; yields whether the selection may need ranks.

    The directory is the run's own: inside the one the environment names, if any (its owner keeps it), else a
    temporary one removed at the end; another run's warnings never count here.
    """
    inherited = os.environ.get(WARNINGS_ENV_VAR)
    directory = Path(tempfile.mkdtemp(prefix="warm-run-", dir=inherited))
    os.environ[WARNINGS_ENV_VAR] = str(directory)
    (directory / SHARED_WARNINGS_MARK).touch()
    try:
        _import_warm_modules(directory)
        # What the imports made lives as long as the process: out of the collector's reach, every collection in the
        # sessions and ranks forked from here skips it (pytest collects five times at each session's end).
        gc.freeze()
        ranks = may_need_ranks(pytest_args)
        if ranks and server:
            fork_fork_server()
        yield ranks
    finally:
        if inherited is None:
            shutil.rmtree(directory, ignore_errors=True)


def run_one(pytest_args: Sequence[str]) -> int:
    """The case command's session for one subject, in this process after the warm imports; its exit status."""
    with _warm_run(pytest_args, server=True):
        _own_warnings("session")
        return _run_session(list(pytest_args))


def run_subjects(
    report_dir: Path,
    subjects: Sequence[str],
    pytest_args: Sequence[str],
    mutations: Sequence[dict[str, Any] | None] = (),
) -> int:
    """One session per subject, forked from this warm process, each with its Megatron mutant in ``mutations`` (in
    the subjects' order; none where empty); the overall exit status."""
    report_dir.mkdir(parents=True, exist_ok=True)
    mutations = list(mutations) or [None] * len(subjects)
    shared_server = any(mutation is None for mutation in mutations)
    statuses = []
    with _warm_run(pytest_args, server=shared_server) as ranks:
        for index, (spec, mutation) in enumerate(zip(subjects, mutations, strict=True), 1):
            folder = subject_folder(report_dir, index, spec)
            shutil.rmtree(folder, ignore_errors=True)  # what an earlier run left is never read as this one's
            folder.mkdir(parents=True)
            if ranks and mutation is None:
                start_fork_server()  # here, its parent, a server that died is seen and replaced
            arguments = [
                *pytest_args,
                f"--subject={spec}",
                f"--junitxml={folder / 'junit.xml'}",
                f"--report-dir={folder}",
            ]
            what = f"{spec} on Megatron mutant {mutation['id']}" if mutation else spec
            print(f"==== subject {index} of {len(subjects)}: {what} (reports in {folder}) ====", flush=True)
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                _run_child(arguments, folder, read_end, write_end, mutation, ranks)
            os.close(write_end)
            _tee(read_end, folder / OUTPUT_FILE)
            _, wait_status = os.waitpid(pid, 0)
            statuses.append(os.waitstatus_to_exitcode(wait_status))
            (folder / SUBJECT_STATUS_FILE).write_text(f"{statuses[-1]}\n")
    return overall_status(statuses)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.plugin.warm_sessions", description=__doc__.split("\n")[0])
    parser.add_argument("--report-dir", type=Path, help="where each subject's folder goes (with --subject)")
    parser.add_argument("--subject", action="append", default=[], help="a subject; repeat for each")
    parser.add_argument("--mutations", type=Path, help="a Megatron mutant per subject: harness.targets.in_place_mutant")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then the case command's pytest arguments")
    options = parser.parse_args(argv)
    pytest_args = options.pytest_args[1:] if options.pytest_args[:1] == ["--"] else options.pytest_args
    if not options.subject:
        if options.report_dir or options.mutations:
            parser.error("--report-dir and --mutations go with --subject")
        return run_one(pytest_args)
    if options.report_dir is None:
        parser.error("--subject needs --report-dir")
    mutations: list[dict[str, Any] | None] = []
    if options.mutations is not None:
        from harness.targets.in_place_mutant import read_mutations

        mutations = read_mutations(options.mutations, len(options.subject))
    return run_subjects(options.report_dir, options.subject, pytest_args, mutations)


if __name__ == "__main__":
    leave(main())
