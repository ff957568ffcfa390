"""The section the gate attaches to every red case, and the repro line in it.

Written by the pytest plugin into the failure text (so it reaches the terminal and JUnit), read back by the report
to link each red cell to the line that replays it. Both directions live here so the two cannot drift apart.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from harness.formats.environment import launcher

TITLE = "megatron-conformance"
"""The section's title in pytest's failure report."""

_HEADER = re.compile(r"^target (\S+) \| contract (\S+) \| symbol (.+)$", re.MULTILINE)
_REPRO = re.compile(r"^repro: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class RedSection:
    """What a red case says about itself: where, which contract and symbol, and how to replay it."""

    target: str
    contract: str
    symbol: str
    repro: str

    def text(self) -> str:
        """The section body as the plugin writes it."""
        return f"target {self.target} | contract {self.contract} | symbol {self.symbol}\nrepro: {self.repro}"


def repro_line(session: str, nodeid: str, environment: Mapping[str, str] | None = None) -> str:
    """The shell line that re-runs ``nodeid`` on ``session``, with the environment assignments it needs first (the
    subject, a generated matrix)."""
    prefix = "".join(f"{name}={shlex.quote(value)} " for name, value in (environment or {}).items())
    return f"{prefix}{launcher()} -R -s {session} -- {shlex.quote(nodeid)}"


def parse(text: str) -> tuple[RedSection | None, str | None]:
    """The section found in a failure's text, and its repro line on its own (a red can carry the line without the
    header); ``None`` for what is absent."""
    header, repro = _HEADER.search(text), _REPRO.search(text)
    repro_text = repro.group(1).strip() if repro else None
    if header is None or repro_text is None:
        return None, repro_text
    return RedSection(header.group(1), header.group(2), header.group(3).strip(), repro_text), repro_text
