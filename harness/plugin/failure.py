"""The one way a case words its assertion message, so every red reads the same: the target, the contract, what was
violated, and the details on their own lines. The plugin adds the symbol and the repro line below it. The head is
read back here too (the sensitivity runner tells a contract verdict from a crash by it)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from harness.targets.matrix import Target

_HEAD = re.compile(r"^\[(?P<target>[^\]\s]+)\] (?P<contract>[\w-]+):")


def contract_failure(target: Target, contract: str, what: str, details: str | Iterable[str] = ()) -> str:
    """``[megatron-0.15] chunk-splitting: <what>`` followed by ``details`` (a line, or lines indented by two)."""
    head = f"[{target.session}] {contract}: {what}"
    if isinstance(details, str):
        return f"{head}: {details}" if details else head
    lines = [f"  {line}" for line in details]
    return "\n".join([head + (":" if lines else ""), *lines])


def one_line(message: str) -> str:
    """A failure message in one line, as the advisory list shows it: the head, and the first detail where the head
    ends in ``:`` (pytest's ``Failed:`` / ``AssertionError:`` prefixes and rewritten ``assert`` lines left out)."""
    lines = [line.strip() for line in message.splitlines()]
    lines = [
        line.removeprefix("Failed: ").removeprefix("AssertionError: ")
        for line in lines
        if line and not line.startswith("assert ")
    ]
    head = lines[0] if lines else "advisory property"
    return f"{head} {lines[1]}" if head.endswith(":") and len(lines) > 1 else head


def whole_message(message: str) -> str:
    """The message as the case worded it, indentation kept (a diff in it reads as one), for a report to fold below
    :func:`one_line`: pytest's prefix and the rewritten ``assert`` explanation it appends left out; "" when the one
    line already says all of it."""
    lines = message.removeprefix("Failed: ").removeprefix("AssertionError: ").splitlines()
    end = next((i for i, line in enumerate(lines) if i and line.startswith("assert ")), len(lines))
    kept = [line.rstrip() for line in lines[:end]]
    if message.startswith("AssertionError: ") and all(line.startswith("  ") for line in kept[1:] if line):
        kept[1:] = [line[2:] for line in kept[1:]]  # pytest indents an assert message's later lines by two
    while kept and not kept[-1]:
        kept.pop()
    return "\n".join(kept) if len([line for line in kept if line.strip()]) > 2 else ""


def parse_head(message: str) -> tuple[str, str] | None:
    """``(target session, contract)`` of a message :func:`contract_failure` worded; ``None`` for any other."""
    match = _HEAD.match(message)
    return (match["target"], match["contract"]) if match else None
