"""What a framework's code does only on some targets or machines is judged for this one: a call of Megatron its own
version check keeps from running here is no red of the call-shape check (a finding names the check), a declared
symbol Megatron defines only with Transformer Engine is not reported missing on a CPU machine, and what the declared
apply re-binds in torch is put back after each case that applies it. Each beside the seeded break that stays red.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.pytest_helpers import run_target_cases

SESSION = "megatron-0.15"
TE_FORWARD = "megatron.core.extensions.transformer_engine:TEDotProductAttention.forward"
GATING = "megatron.core.transformer.moe.router:TopKRouter.gating"

PATCH = '''"""A framework's Megatron code: a checkpoint strategy built as newer releases take it; a router patch."""

import megatron.core
import torch.distributed
from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy
from megatron.core.transformer.moe import router
from packaging import version

NEWER = version.parse(megatron.core.__version__) >= version.parse("99.0")


def save_strategy():
    {call}


def gating(self, logits):
    return logits


def _barrier(*args, **kwargs):
    return None


def apply():
    router.TopKRouter.gating = gating
    torch.distributed.barrier = _barrier
'''

GUARDED = """if NEWER:
        return TorchDistSaveShardedStrategy()
    return None"""
UNGUARDED = "return TorchDistSaveShardedStrategy()"


def framework(root: Path, call: str, extra_symbols: str = "") -> Path:
    package = root / "here" / "mcore"
    package.mkdir(parents=True)
    (root / "here" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "patch.py").write_text(PATCH.format(call=call))
    declaration = root / "megatron-conformance.toml"
    declaration.write_text(
        '[subject]\nsource_root = "."\nadapter_package = "here.mcore"\n\n'
        '[symbols_patch]\nmodule = "here.mcore.patch"\napply = "apply"\n\n'
        "[megatron_symbols]\n"
        f'"{GATING}" = "replaces with here.mcore.patch:gating"\n'
        '"megatron.core.dist_checkpointing.strategies.torch:TorchDistSaveShardedStrategy" = "calls"\n'
        f"{extra_symbols}"
    )
    return declaration


def findings(run_dir: Path) -> list[str]:
    return [f["text"] for f in json.loads((run_dir / "summary.json").read_text())["findings"]]


def test_a_call_its_own_version_check_skips_is_no_red_and_torch_is_put_back(tmp_path: Path) -> None:
    declaration = framework(tmp_path / "fw", GUARDED, f'"{TE_FORWARD}" = "reads"\n')
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    assert run.returncode == 0, run.failed()
    said = findings(tmp_path / "run")
    assert any(
        "TorchDistSaveShardedStrategy: the call at patch.py:14 is not made here, by here/mcore/patch.py:13" in f
        for f in said
    ), said
    assert f"{TE_FORWARD}: not checked here: Megatron defines it only with Transformer Engine" in said, said


def test_the_same_call_unguarded_is_red(tmp_path: Path) -> None:
    declaration = framework(tmp_path / "fw", UNGUARDED)
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    failed = run.require_red("a call of TorchDistSaveShardedStrategy() no check keeps from running on 0.15")
    assert "missing a required argument" in failed["test_subject_calls_bind_to_upstream_signatures"], failed


def test_a_missing_symbol_elsewhere_stays_red(tmp_path: Path) -> None:
    missing = '"megatron.core.transformer.moe.router:TopKRouter.gating_v2" = "reads"\n'
    declaration = framework(tmp_path / "fw", GUARDED, missing)
    run = run_target_cases(SESSION, ["cases/test_api_fingerprint.py"], tmp_path / "run", declaration)
    failed = run.require_red("a declared symbol 0.15 lacks, outside Transformer Engine's modules")
    assert "TopKRouter.gating_v2" in failed["test_declared_symbols_exist"], failed
