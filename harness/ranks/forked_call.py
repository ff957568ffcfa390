"""One call in a process forked from the fork server the ranks start from.

For work a session must keep out of its own state (a process group, Megatron's parallel state) that needs torch and
Megatron imported: the fork server has imported both and holds nothing of the session's, so its child starts at once
where a fresh interpreter of the target venv imports them again (about 4 s). The function is named as
``module:function`` and imported in the child, so a package below the caller's layer can be asked to run it.
"""

from __future__ import annotations

import importlib
import multiprocessing.connection
import os
from typing import Any

from harness.ranks.fork_server import die_with_parent, rank_context


class ForkedCallError(RuntimeError):
    """The call gave no value: it raised, took too long, or its process ended first. The message says which."""


def call_in_fork(target: str, *args: Any, timeout_s: float) -> Any:
    """``target`` (``module:function``) called with ``args`` in a process forked from the fork server (spawned where
    there is none); its return value, pickled back. The process dies with this one, and is killed past ``timeout_s``.
    """
    context = rank_context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_call_and_send, args=(target, args, sender, os.getpid()), daemon=True)
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout_s):
            raise ForkedCallError(f"{target} took over {timeout_s:g} s")
        raised, value = receiver.recv()
    except EOFError:
        process.join()
        ended = f"{target}: its process ended with exit status {process.exitcode} before it answered"
        raise ForkedCallError(ended) from None
    finally:
        receiver.close()
        if process.is_alive():
            process.kill()
        process.join()
    if raised:
        raise ForkedCallError(f"{target} raised {value}")
    return value


def _call_and_send(target: str, args: tuple, sender: multiprocessing.connection.Connection, parent: int) -> None:
    die_with_parent(parent)
    module, _, name = target.partition(":")
    try:
        answer = (False, getattr(importlib.import_module(module), name)(*args))
    except Exception as err:  # sent as one line: the caller's error names it
        answer = (True, " ".join(f"{type(err).__name__}: {err}".split()))
    sender.send(answer)
    sender.close()
