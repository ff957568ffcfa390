"""A call in a process forked from the fork server: its value comes back from another process, and every way of not
answering (raising, running past the timeout, exiting first) is an error that says which."""

from __future__ import annotations

import os

import pytest

from harness.ranks.forked_call import ForkedCallError, call_in_fork


def test_the_value_comes_back_from_another_process() -> None:
    assert call_in_fork("os.path:join", "a", "b", timeout_s=60) == os.path.join("a", "b")
    child = call_in_fork("os:getpid", timeout_s=60)
    assert isinstance(child, int) and child != os.getpid()


@pytest.mark.parametrize(
    ("target", "args", "timeout_s", "says"),
    [
        ("json:loads", ("{",), 60, "json:loads raised JSONDecodeError: Expecting property name"),
        ("time:sleep", (30,), 0.5, "time:sleep took over 0.5 s"),
        ("os:_exit", (3,), 60, "os:_exit: its process ended with exit status 3 before it answered"),
        ("harness.no_such_module:f", (), 60, "raised ModuleNotFoundError: No module named 'harness.no_such_module'"),
    ],
    ids=["raises", "too-long", "exits-first", "not-importable"],
)
def test_no_answer_is_an_error_saying_why(target: str, args: tuple, timeout_s: float, says: str) -> None:
    with pytest.raises(ForkedCallError) as caught:
        call_in_fork(target, *args, timeout_s=timeout_s)
    assert says in str(caught.value)
