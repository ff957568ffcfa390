"""The import family's verdicts do not depend on what ran before it: an adapter that imports Megatron's GPT model
module at import is judged the same alone, after a case that imported that module first, and in reverse order."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pytest_helpers import on_one_target, run_target_cases

IMPORT_FAMILY = "cases/test_import_side_effects.py"
GPT_FIRST = "cases/test_model_provider.py::test_real_gpt_model_through_the_wrapper"


def gpt_importing_subject(tmp_path: Path) -> Path:
    """The reference subject, with an adapter package that imports ``megatron.core.models.gpt.gpt_model``."""
    adapter = tmp_path / "subject" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "__init__.py").write_text("from megatron.core.models.gpt import gpt_model  # noqa: F401\n")
    subject = tmp_path / "subject" / "gpt_importing.py"
    subject.write_text(
        "from pathlib import Path\n\nfrom harness.reference import *  # noqa: F403\n\n"
        'ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapter")\n'
    )
    return subject


@pytest.mark.parametrize("session", on_one_target(["megatron-0.15", "megatron-0.19"], ["megatron-0.15"]))
def test_three_orders_give_the_same_verdicts(session: str, tmp_path: Path) -> None:
    subject = gpt_importing_subject(tmp_path)
    alone = run_target_cases(session, [IMPORT_FAMILY], tmp_path / "alone", subject=subject)
    cases = sorted(alone.verdicts)
    assert cases and all(name.startswith("test_") for name in cases), alone.output[-3000:]
    reverse = [f"{IMPORT_FAMILY}::{name}" for name in reversed(cases)]
    after_gpt = run_target_cases(session, [GPT_FIRST, IMPORT_FAMILY], tmp_path / "after-gpt", subject=subject)
    reversed_order = run_target_cases(session, reverse, tmp_path / "reversed", subject=subject)
    verdicts = {
        order: {name: run.verdicts[name][0] for name in cases}
        for order, run in (("alone", alone), ("after the GPT case", after_gpt), ("reversed", reversed_order))
    }
    assert verdicts["alone"] == verdicts["after the GPT case"] == verdicts["reversed"], verdicts
    assert set(verdicts["alone"].values()) <= {"passed", "skipped"}, alone.failed()
