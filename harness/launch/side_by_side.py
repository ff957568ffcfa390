"""Several commands run at once, each one's output kept whole and printed when it ends.

The project's tests first run the reference subject's session on every target (each a check that the release is
green, and the builder of the venv the end-to-end tests use). One target session keeps about one of two cores busy:
building its venv waits on the disk and the package cache, a rank waits on its peers. Two at a time finish the six in
about two thirds of the time one after another. Their outputs are not interleaved: each goes to a log file of its
own, printed in full, under a header naming the command, as soon as that command ends.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

JOBS_ENV_VAR = "MEGATRON_CONFORMANCE_TARGET_JOBS"
DEFAULT_JOBS = 2


def jobs_from(value: str | None) -> int:
    """How many target sessions run at once: ``value`` of :data:`JOBS_ENV_VAR`, else :data:`DEFAULT_JOBS`; anything
    but a whole number of at least 1 is refused with one line naming the variable."""
    if value is None or value.strip() == "":
        return DEFAULT_JOBS
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"{JOBS_ENV_VAR}={value!r}: expected a whole number of target sessions at once, at least 1")
    return int(value)


@dataclass(frozen=True)
class Ended:
    """One command's end: its exit status, its wall time and the log holding everything it printed."""

    name: str
    returncode: int
    seconds: float
    log: Path


def run_side_by_side(
    commands: Mapping[str, Sequence[str]],
    jobs: int,
    log_dir: Path,
    env: Mapping[str, str],
    out: TextIO = sys.stdout,
    poll_s: float = 0.5,
) -> list[Ended]:
    """Run every command of ``commands`` (by name, in order), at most ``jobs`` at a time; print each one's log to
    ``out`` as it ends; return how each ended, in the order they ended. Every command runs, whatever the others do."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting = list(commands.items())
    running: dict[str, tuple[subprocess.Popen[bytes], float, Path]] = {}
    ended: list[Ended] = []
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                name, command = waiting.pop(0)
                log = log_dir / f"{name}.log"
                with log.open("wb") as sink:
                    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=dict(env))
                running[name] = (process, time.monotonic(), log)
            for name, (process, started, log) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[name]
                done = Ended(name, process.returncode, time.monotonic() - started, log)
                ended.append(done)
                _print_log(done, commands[name], out)
            if running:
                time.sleep(poll_s)
    finally:
        # Interrupted (Ctrl-C, a CI job cancelled): no command is left running without the one that started it.
        for process, _, _ in running.values():
            process.terminate()
        for process, _, _ in running.values():
            process.wait()
    return ended


def _print_log(done: Ended, command: Sequence[str], out: TextIO) -> None:
    status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    out.write(f"===== {done.name} ({status}, {done.seconds:.0f} s): {' '.join(command)}\n")
    out.write(done.log.read_text(errors="replace"))
    out.write(f"===== end of {done.name}\n")
    out.flush()
