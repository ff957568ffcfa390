"""A framework as published, end to end on one target: verl 0.9.1 declared with ``[subject] distribution``
(``tests/published/verl/``), installed from the package index beside megatron-0.16 and run as a user runs it. Its
patches that verl's own apply makes are checked applied, the rest read from source; the one red is the node method it
swaps after Megatron's constructor kept it; every verdict that is no fit names the Megatron line behind it, and the
cells agree with the table written for verl beforehand as ``nox -s frameworks`` counts them (every target and
framework: ``nox -s frameworks``, not CI's job).
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
READ_FROM_SOURCE = "test_replaced_symbols_read_from_source_fit_megatrons_calls"
NODE_SWAP = (
    "megatron.core.models.gpt.fine_grained_callables:PostProcessNode.forward_impl"
    "@verl/models/mcore/model_forward_1f1b_overlap.py:247"
)
NODE_KEEPS = "megatron/core/models/gpt/fine_grained_callables.py:175"
"""Where 0.16's ``PostProcessNode.__init__`` keeps ``weak_method(self.forward_impl)``: verl's later swap of the
method on the built node never reaches what the schedule calls."""


def test_verl_as_published_installed_beside_a_target_and_run(tmp_path: Path) -> None:
    found, _, report, outcome = session_run("verl", SESSION, tmp_path)
    assert outcome == f"red: {READ_FROM_SOURCE}", outcome
    # Nothing left out, moved or overridden; the one thing said is hydra-core's and omegaconf's pin of an antlr4
    # runtime from 2021, which the release-age check names.
    assert [line.partition(" ")[0] for line in report] == ["antlr4-python3-runtime"], report
    assert " years behind " in report[0] and "forced by hydra-core" in report[0], report
    recorded = {r["symbol"]: r for r in json.loads((tmp_path / "replaced_symbols.json").read_text())["symbols"]}
    reds = {symbol: r["findings"] for symbol, r in recorded.items() if r["verdict"] == "red"}
    assert list(reds) == [NODE_SWAP], reds
    assert any(NODE_KEEPS in finding for finding in reds[NODE_SWAP]), reds
    forward = recorded[MLA_FORWARD]
    assert (forward["how"], forward["verdict"]) == ("applied", "advisory"), forward
    assert any("rotary_pos_cos_sin" in finding for finding in forward["findings"]), forward
    for record in recorded.values():
        if record["verdict"] in ("red", "advisory"):
            assert all(MEGATRON_LINE.search(f) for f in record["findings"]), record
    row = cells(table_of("verl"), MEGATRON, found)
    agreeing = sum(cell.agrees for cell in row.values())
    assert agreeing >= len(row) - 4, {symbol: cell for symbol, cell in row.items() if not cell.agrees}
