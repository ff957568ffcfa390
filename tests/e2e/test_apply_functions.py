"""``[symbols_patch] apply`` naming several functions, as real frameworks spread their patches: each is applied
whatever another raises. What a raising one never bound is read from source (its why names the raise), what the
others bound is checked applied, and the raise is a finding of the session. A seeded break in a function applied
beside a raising one still turns the session red.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.pytest_helpers import run_target_cases

SESSION = "megatron-0.15"
GATING = "megatron.core.transformer.moe.router:TopKRouter.gating"
FORWARD = "megatron.core.transformer.multi_latent_attention:MultiLatentAttention.forward"

PATCH = '''"""Two patches, one per Megatron area; the attention one needs Transformer Engine."""

from megatron.core.transformer.moe import router


def gating(self, {gating_parameters}):
    return logits


def forward(self, *args, **kwargs):
    raise NotImplementedError


def apply_router():
    router.TopKRouter.gating = gating


def apply_attention():
    import transformer_engine  # noqa: F401

    from megatron.core.transformer import multi_latent_attention

    multi_latent_attention.MultiLatentAttention.forward = forward
'''


def framework(root: Path, gating_parameters: str) -> Path:
    package = root / "spread" / "mcore"
    package.mkdir(parents=True)
    (root / "spread" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "patch.py").write_text(PATCH.format(gating_parameters=gating_parameters))
    declaration = root / "megatron-conformance.toml"
    declaration.write_text(
        '[subject]\nsource_root = "."\nadapter_package = "spread.mcore"\n\n'
        '[symbols_patch]\nmodule = "spread.mcore.patch"\napply = ["apply_attention", "apply_router"]\n\n'
        "[megatron_symbols]\n"
        f'"{GATING}" = "replaces with spread.mcore.patch:gating"\n'
        f'"{FORWARD}" = "replaces with spread.mcore.patch:forward"\n'
    )
    return declaration


def test_a_raising_apply_function_leaves_its_symbols_to_the_source_and_the_others_applied(tmp_path: Path) -> None:
    declaration = framework(tmp_path / "fw", "logits")
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    assert run.returncode == 0, run.failed()
    assert run.report_dir is not None
    recorded = {r["symbol"]: r for r in json.loads((run.report_dir / "replaced_symbols.json").read_text())["symbols"]}
    assert recorded[GATING]["how"] == "applied" and recorded[GATING]["verdict"] == "fits", recorded[GATING]
    assert recorded[FORWARD]["how"] == "from source", recorded[FORWARD]
    assert recorded[FORWARD]["why"].startswith(
        "not checked applied: not applied here: the declared apply's apply_attention raised ModuleNotFoundError"
    ), recorded[FORWARD]["why"]
    findings = [f["text"] for f in json.loads((run.report_dir / "summary.json").read_text())["findings"]]
    assert (
        "the declared apply's apply_attention raised ModuleNotFoundError: No module named 'transformer_engine': "
        "what it bound before is checked applied"
    ) in findings, findings


def test_a_break_beside_a_raising_apply_function_is_red(tmp_path: Path) -> None:
    declaration = framework(tmp_path / "fw", "logits, extra")
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    failed = run.require_red("a gating that cannot bind Megatron's call, applied beside a raising apply")
    assert any(GATING in text for text in failed.values()), failed
