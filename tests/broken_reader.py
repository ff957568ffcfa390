"""A seeded bug of the gate's own source reader, loaded into a target session with ``-p tests.broken_reader``: reading
an assignment raises, as reading a framework whose own package lives in ``megatron.`` once did (``IndexError`` in
the starter). The session must end with the gate's own status and one line naming the file and the statement being
read, never with a red of the framework and never with a traceback of the reader."""

from __future__ import annotations

import ast

from harness.source.framework_patches import _Reader


def _assigned_raises(self: _Reader, target: str | None, value: ast.expr, node: ast.stmt, *rest: object) -> bool:
    return [][len(rest)]


_Reader.assigned = _assigned_raises
