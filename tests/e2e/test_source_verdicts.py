"""Replaced Megatron symbols judged from source, where the framework cannot be imported or its apply cannot run:
seeded breaks of each rule are red (or advisory) naming Megatron's line, correct variants fit, a patch the framework's
own version check skips reads "not applied here", and a declared framework whose apply needs Transformer Engine
gets those verdicts in its target session while the families that need it loaded are skipped, not red.

Each seeded framework is a package written by :mod:`tests.source_seeds` whose patch module imports
``transformer_engine`` first: importing it raises on this machine, so nothing but its source can be read. Megatron's
source is megatron-core 0.15.3's (the target venv, else its wheel from the cache). The ways frameworks patch beyond
an assignment (``__class__`` swaps, back-fills, ...) are in ``tests/e2e/test_source_patch_forms.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.source.call_sites import MegatronSource
from harness.source.from_source import versions_of
from harness.source.source_verdicts import framework_verdicts
from harness.targets.release_source import distribution_source, release_source
from tests.pytest_helpers import ROOT, run_subjects_together, run_target_cases
from tests.source_seeds import (
    FORWARD,
    MLA,
    NODE_KEEPS,
    POST_PROCESS,
    seeded_framework,
    seeded_release,
    verdicts,
)

SESSION = "megatron-0.15"
LAYER_CALL = "megatron/core/transformer/transformer_layer.py:499"
"""Where ``TransformerLayer`` calls its self-attention (``self.self_attention(...)``) with ``rotary_pos_cos_sin=``."""
QKV_UNPACK = "megatron/core/transformer/multi_latent_attention.py:236"
"""Where ``MultiLatentAttention.forward`` unpacks three values of ``get_query_key_value_tensors``."""
QKV = f"{MLA}:MLASelfAttention.get_query_key_value_tensors"

FORWARD_PARAMETERS = (
    "self, hidden_states, attention_mask, key_value_states=None, inference_context=None, rotary_pos_emb=None, "
    "rotary_pos_cos=None, rotary_pos_sin=None, attention_bias=None, packed_seq_params=None, position_ids=None, "
    "sequence_len_offset=None, *, inference_params=None"
)
SEEDS = {
    "forward_missing_keyword": f"""
def forward({FORWARD_PARAMETERS}):
    return hidden_states, None

def apply():
    MultiLatentAttention.forward = forward
""",
    "forward_drops_keyword": f"""
def forward({FORWARD_PARAMETERS}, **kwargs):
    return hidden_states, None

def apply():
    MultiLatentAttention.forward = forward
""",
    "qkv_returns_two": """
def get_query_key_value_tensors(self, hidden_states, key_value_states=None, position_ids=None,
                                packed_seq_params=None, inference_context=None, *, inference_params=None):
    return hidden_states, hidden_states

def apply():
    MLASelfAttention.get_query_key_value_tensors = get_query_key_value_tensors
""",
    "original_called_with_a_removed_keyword": """
def apply():
    original = MLASelfAttention.get_query_key_value_tensors

    def get_query_key_value_tensors(self, hidden_states, *args, **kwargs):
        return original(self, hidden_states, *args, rotary_pos_emb=None, **kwargs)

    MLASelfAttention.get_query_key_value_tensors = get_query_key_value_tensors
""",
    "skipped_by_its_version_check": f"""
def forward({FORWARD_PARAMETERS}):
    return hidden_states, None

def apply():
    if version.parse(megatron.core.__version__) >= version.parse("0.15.0"):
        return
    MultiLatentAttention.forward = forward
""",
    "forwards_everything": """
def apply():
    original = MultiLatentAttention.forward

    def forward(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    MultiLatentAttention.forward = forward
""",
    "same_name_in_another_package": """
import transformer_engine.pytorch.attention as te_attention

def apply_rotary_pos_emb(t):
    return t

def apply():
    te_attention.apply_rotary_pos_emb = apply_rotary_pos_emb
""",
}


def write_framework(root: Path, seed: str) -> Path:
    return seeded_framework(root, seed, SEEDS[seed])


@pytest.fixture(scope="module")
def megatron() -> MegatronSource:
    return seeded_release()


def test_a_forward_that_cannot_bind_a_keyword_its_layer_passes_through_call_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = verdicts(write_framework(tmp_path, "forward_missing_keyword"), megatron)
    verdict = found[FORWARD]
    assert verdict.verdict == "red", verdict.line()
    assert any(LAYER_CALL in f and "'rotary_pos_cos_sin'" in f for f in verdict.findings), verdict.findings
    assert verdict.patched_at == ["seeded/patch.py:10"], verdict.patched_at


def test_a_forward_that_drops_a_keyword_its_layer_passes_is_an_advisory(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, "forward_drops_keyword"), megatron)[FORWARD]
    assert verdict.verdict == "advisory", verdict.line()
    assert verdict.findings == [f"'rotary_pos_cos_sin', passed at {LAYER_CALL}, is taken in **kwargs and never read"]


def test_a_replacement_returning_one_value_fewer_than_megatron_unpacks_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, "qkv_returns_two"), megatron)[QKV]
    assert verdict.verdict == "red", verdict.line()
    assert any(f"{QKV_UNPACK} unpacks 3 values" in f and "returns 2" in f for f in verdict.findings), verdict.findings


def test_a_wrapper_calling_the_original_with_a_keyword_the_target_removed_is_red(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    verdict = verdicts(write_framework(tmp_path, "original_called_with_a_removed_keyword"), megatron)[QKV]
    assert verdict.verdict == "red", verdict.line()
    assert any("calls the original" in f and "'rotary_pos_emb'" in f for f in verdict.findings), verdict.findings


def test_a_patch_its_own_version_check_skips_reads_not_applied_here(tmp_path: Path, megatron: MegatronSource) -> None:
    verdict = verdicts(write_framework(tmp_path, "skipped_by_its_version_check"), megatron)[FORWARD]
    assert verdict.verdict == "skipped", verdict.line()
    assert verdict.findings == ["not applied here by seeded/patch.py:10"], verdict.findings


def test_a_wrapper_forwarding_everything_fits_every_call_site(tmp_path: Path, megatron: MegatronSource) -> None:
    verdict = verdicts(write_framework(tmp_path, "forwards_everything"), megatron)[FORWARD]
    assert verdict.verdict == "fits", verdict.line()
    assert LAYER_CALL in verdict.calls, verdict.calls


def test_a_same_named_function_of_another_package_is_no_megatron_symbol(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    assert verdicts(write_framework(tmp_path, "same_name_in_another_package"), megatron) == {}


DECLARATION = """\
[subject]
source_root = "."
adapter_package = "seeded"
label = "seeded forward, needs Transformer Engine"

[symbols_patch]
module = "seeded.patch"
apply = "apply"

[megatron_symbols]
"megatron.core.transformer.multi_latent_attention:MultiLatentAttention.forward" = "replaces with seeded.patch:forward"
"""


def test_a_framework_whose_apply_needs_transformer_engine_is_judged_from_source_in_its_session(tmp_path: Path) -> None:
    """The session cannot load the subject (``transformer_engine`` missing): the families that need it are skipped,
    saying so; api-fingerprint reads the replaced ``forward`` from source, red naming the layer's call."""
    root = write_framework(tmp_path / "frameworks", "forward_missing_keyword")
    declaration = root / "megatron-conformance.toml"
    declaration.write_text(DECLARATION)
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    failed = run.require_red("a forward read from source that cannot bind")
    assert set(failed) == {"test_replaced_symbols_read_from_source_fit_megatrons_calls"}, sorted(failed)
    assert LAYER_CALL in failed["test_replaced_symbols_read_from_source_fit_megatrons_calls"]
    assert "transformer_engine" in run.output and "checked from source" in run.output, run.output[-3000:]
    assert run.report_dir is not None
    recorded = json.loads((run.report_dir / "replaced_symbols.json").read_text())["symbols"]
    assert [(r["symbol"], r["how"], r["verdict"]) for r in recorded] == [(FORWARD, "from source", "red")], recorded


FRAMEWORKS = sorted(path.parent for path in (ROOT / "tests" / "frameworks").glob("*/megatron-conformance.toml"))


def test_live_and_source_give_the_same_verdict_on_every_framework(tmp_path: Path) -> None:
    """Every replaced symbol the frameworks of ``tests/frameworks/`` apply here is also read from source in the same
    session (``replaced_symbols.json``: ``verdict`` and ``from_source``): where the source path can read the
    replacement, both give the same verdict. What it cannot read is a replacement no source names: a closure the
    apply makes (dove's ``__post_init__``, osprey's factory), a registry's entry or a context manager's binding whose
    declaration names no function (finch, tern, plover); those are checked applied only, and listed here."""
    declarations = [path / "megatron-conformance.toml" for path in FRAMEWORKS]
    runs = run_subjects_together(SESSION, ["cases/test_api_fingerprint.py"], declarations, tmp_path)
    compared, differing, unread = 0, [], []
    for declaration, run in runs.items():
        assert run.report_dir is not None
        written = run.report_dir / "replaced_symbols.json"
        records = json.loads(written.read_text())["symbols"] if written.is_file() else []
        for record in (r for r in records if r["how"] == "applied" and r["verdict"] != "on the real step"):
            name = f"{Path(declaration).parent.name} {record['symbol']}"
            if record["from_source"] is None or record["from_source"] == "undecided" != record["verdict"]:
                unread.append(name)
                continue
            compared += 1
            if record["from_source"] != record["verdict"]:
                differing.append(f"{name}: applied {record['verdict']}, from source {record['from_source']}")
    assert compared >= 10, f"only {compared} symbols compared; not read from source: {unread}"
    assert not differing, differing
    frameworks = {name.split()[0] for name in unread}
    assert frameworks <= {"dove", "osprey", "finch", "tern", "plover"}, unread


VERL = ("verl", "0.9.1", "verl")
VERL_FORWARD_CALL = {"0.15.3": LAYER_CALL, "0.16.1": "megatron/core/transformer/transformer_layer.py:"}


@pytest.mark.parametrize("release", ["0.15.3", "0.16.1", "0.17.1"])
def test_verl_as_published_drops_rotary_pos_cos_sin_in_its_mla_forward_until_its_own_check_skips_it(
    release: str,
) -> None:
    """verl 0.9.1's wheel, read from source: its copy of ``MultiLatentAttention.forward`` takes what
    ``TransformerLayer`` passes through ``nn.Module.__call__`` into ``**kwargs`` and drops ``rotary_pos_cos_sin`` on
    0.15 and 0.16; from 0.16.2 on its own version check leaves the patch out."""
    root = distribution_source(*VERL)
    megatron = MegatronSource(release_source(release, venvs=ROOT / ".nox").root)
    found = {v.symbol: v for v in framework_verdicts(root, megatron, versions_of(megatron, release, "2.13.0"))}
    verdict = found[FORWARD]
    if release == "0.17.1":
        assert verdict.verdict == "skipped" and verdict.findings == [
            "not applied here by verl/models/mcore/patch.py:442"
        ]
        return
    assert verdict.verdict == "advisory", verdict.line()
    assert any(
        f.startswith("'rotary_pos_cos_sin', passed at ") and VERL_FORWARD_CALL[release] in f for f in verdict.findings
    ), verdict.findings


def test_verl_as_published_in_its_target_session(tmp_path: Path) -> None:
    """The same, end to end in a target session, the framework declared from its unpacked wheel: api-fingerprint
    reads every replaced symbol from source (nothing declared to apply). One red, naming Megatron's line: verl swaps
    ``forward_impl`` on a built ``PostProcessNode``, whose constructor already handed ``weak_method(self.forward_impl)``
    to its base; the dropped keyword an advisory; every symbol in ``replaced_symbols.json`` with how it was checked."""
    declaration = tmp_path / "megatron-conformance.toml"
    declaration.write_text(
        f'[subject]\nsource_root = "{distribution_source(*VERL)}"\nadapter_package = "verl"\nlabel = "verl 0.9.1"\n'
    )
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    failed = run.require_red("verl's node method swapped after its constructor kept it")
    assert list(failed) == ["test_replaced_symbols_read_from_source_fit_megatrons_calls"], failed
    assert POST_PROCESS in run.output and NODE_KEEPS in run.output, run.output[-3000:]
    assert run.report_dir is not None
    summary = json.loads((run.report_dir / "summary.json").read_text())
    dropped = [a for a in summary["advisories"] if "keep_what_megatron_passes" in a["case"]]
    assert dropped and "rotary_pos_cos_sin" in dropped[0].get("detail", dropped[0]["text"]), summary["advisories"]
    recorded = json.loads((run.report_dir / "replaced_symbols.json").read_text())["symbols"]
    assert {r["how"] for r in recorded} == {"from source"} and len(recorded) >= 10, recorded
    reds = [r["symbol"] for r in recorded if r["verdict"] == "red"]
    assert reds == [f"{POST_PROCESS}@verl/models/mcore/model_forward_1f1b_overlap.py:247"], reds
    forward = next(r for r in recorded if r["symbol"] == FORWARD)
    assert forward["verdict"] == "advisory" and forward["why"].startswith("no [megatron_symbols] declared"), forward
