"""A framework as published, end to end on one target: verl 0.9.1 declared with ``[subject] distribution``
(``tests/published/verl/``), installed from the package index beside megatron-0.16 and run as a user runs it. Its
patches that verl's own apply makes are checked applied, the rest read from source; every verdict that is no fit names
the Megatron line behind it, and the cells agree with the table written for verl beforehand as ``nox -s frameworks``
counts them (every target and framework: ``nox -s frameworks``, not CI's job).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.published_sessions import session_run
from tests.published_table import cells, table_of

SESSION, MEGATRON = "megatron-0.16", "0.16.1"
MLA_FORWARD = "megatron.core.transformer.multi_latent_attention:MultiLatentAttention.forward"
MEGATRON_LINE = re.compile(r"megatron/core/\S+\.py:\d+")


def test_verl_as_published_installed_beside_a_target_and_run(tmp_path: Path) -> None:
    found, _, report, outcome = session_run("verl", SESSION, tmp_path)
    assert outcome == "green", outcome
    assert report == [], report
    recorded = {r["symbol"]: r for r in json.loads((tmp_path / "replaced_symbols.json").read_text())["symbols"]}
    forward = recorded[MLA_FORWARD]
    assert (forward["how"], forward["verdict"]) == ("applied", "advisory"), forward
    assert any("rotary_pos_cos_sin" in finding for finding in forward["findings"]), forward
    for record in recorded.values():
        if record["verdict"] in ("red", "advisory"):
            assert all(MEGATRON_LINE.search(f) for f in record["findings"]), record
    row = cells(table_of("verl"), MEGATRON, found)
    agreeing = sum(cell.agrees for cell in row.values())
    assert agreeing >= len(row) - 4, {symbol: cell for symbol, cell in row.items() if not cell.agrees}
