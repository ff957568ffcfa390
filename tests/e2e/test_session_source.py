"""A session's replaced symbols where the declared apply made a patch live: the verdict the live checks gave, unless
the framework itself leaves the patch out on the target by checks around every call of the function that patches
(verl 0.9.1 calls ``apply_mtp_inference_patch`` only on NPUs). Then the symbol is skipped, naming the framework's
check, with the live verdict beside it. Seeded frameworks against megatron-core 0.15.3 (:mod:`tests.source_seeds`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contracts.api_fingerprint.session_source import SessionSource, session_verdicts
from harness.source.call_sites import MegatronSource
from tests.source_seeds import RELEASE, seeded_framework, seeded_release

ROUTING = "megatron.core.transformer.moe.router:TopKRouter.routing"
LIVE = ("fits", ["fits its 1 call site(s): megatron/core/transformer/moe/router.py:552"])
"""What the live checks are taken to have found for the patch the declared apply made."""

SEED = """
from megatron.core.transformer.moe.router import TopKRouter

def is_npu_available():
    return False

def apply_patch():
{inside}
    def routing(self, logits):
        return logits, logits

    TopKRouter.routing = routing

def start():
{around}
"""
SEEDS = {
    "called_only_on_npus": SEED.format(inside="    pass", around="    if is_npu_available():\n        apply_patch()"),
    "called_everywhere": SEED.format(inside="    pass", around="    apply_patch()"),
    "returning_early_inside_where_no_npu_is_found": SEED.format(
        inside="    if not is_npu_available():\n        return", around="    apply_patch()"
    ),
}


@pytest.fixture(scope="module")
def megatron() -> MegatronSource:
    return seeded_release()


def session(tmp_path: Path, seed: str, megatron: MegatronSource) -> SessionSource:
    root = seeded_framework(tmp_path, seed, SEEDS[seed])
    return session_verdicts(root, {}, {}, RELEASE, "2.13.0", {ROUTING: LIVE}, {}, "not declared", megatron)


def test_a_patch_the_framework_makes_only_where_its_callers_check_passes_is_skipped_beside_the_live_verdict(
    tmp_path: Path, megatron: MegatronSource
) -> None:
    found = session(tmp_path, "called_only_on_npus", megatron)
    verdict, findings = found.applied[ROUTING]
    assert verdict == "skipped", found.applied
    assert findings[0] == (
        "not applied here by seeded/patch.py:19; the declared apply makes it, and checked applied it is fits"
    ), findings
    assert findings[1:] == LIVE[1]
    assert f"applied: {ROUTING}: skipped (not applied here by seeded/patch.py:19" in found.lines()[0]


@pytest.mark.parametrize("seed", ["called_everywhere", "returning_early_inside_where_no_npu_is_found"])
def test_a_patch_the_framework_makes_here_or_one_the_live_apply_went_through_keeps_the_live_verdict(
    seed: str, tmp_path: Path, megatron: MegatronSource
) -> None:
    """Called unguarded, the framework makes the patch too; a check inside the function that patches is one the
    live apply itself went through, so the live verdict stands over what the source reads."""
    found = session(tmp_path, seed, megatron)
    assert found.applied == {ROUTING: LIVE}
    assert [v.verdict for v in found.shadow] == ["skipped" if "inside" in seed else "fits"]
