"""On a real target, Megatron's and torch's warnings are grouped one line per kind while the subject's red section,
its short-summary line and the subject's own warning stay whole and in place: the grouping hides nothing of the
code under test."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from harness.plugin.warnings_summary import FULL_LIST
from tests.pytest_helpers import run_target_cases

SESSION = "megatron-0.15"
SUBJECT = '''
    """The reference subject with a splitter that drops its last chunk and says so in a warning of its own."""

    import warnings

    from harness.reference import *  # noqa: F403
    from harness.reference import split_into_chunks as _reference_split


    def split_into_chunks(params, grads, budget_bytes):
        warnings.warn("the subject's own warning: last chunk dropped", UserWarning)
        return _reference_split(params, grads, budget_bytes)[:-1]
'''
SELECTION = [
    "cases/test_chunk_splitting.py::test_partition",
    "cases/test_model_provider.py::test_real_gpt_model_through_the_wrapper[plain]",
    "cases/test_equivalence.py::test_finalize_model_grads_on_a_real_gpt_model[plain-gloo]",
]


def test_megatrons_warnings_are_grouped_and_the_subjects_red_and_warning_stay_whole(tmp_path: Path) -> None:
    subject = tmp_path / "warning_subject.py"
    subject.write_text(textwrap.dedent(SUBJECT))
    run = run_target_cases(SESSION, SELECTION, tmp_path, subject=subject)
    # The reference all-reduce calls the reference splitter, so only the splitter's own family sees the break.
    assert list(run.require_red("warning_subject")) == ["test_partition"], run.output[-3000:]
    lines = run.output.splitlines()
    raw = [line for line in lines if re.search(r"site-packages/(megatron|torch)/\S+: \w*Warning", line)]
    assert not raw, f"Megatron's or torch's warnings printed whole (by the fork server or a rank): {raw}"
    text = "\n".join(lines)

    def index(pattern: str) -> int:
        found = [i for i, line in enumerate(lines) if re.search(pattern, line)]
        assert found, f"no line matches {pattern!r}:\n{text[-6000:]}"
        return found[0]

    red_section = index(r"^target megatron-0\.15 \| contract chunk-splitting \| symbol ")
    warnings_summary = index(r"=+ warnings summary =+$")
    grouped = index(r"^-+ \d+ warnings from installed packages, one line per kind -+$")
    short = index(r"=+ short test summary info =+$")
    assert red_section < warnings_summary < grouped < short, text[-6000:]
    assert any(re.match(r"FAILED cases/test_chunk_splitting\.py::test_partition", line) for line in lines[short:])

    summary = lines[warnings_summary:grouped]
    assert any(f"{subject}:" in line and "UserWarning: the subject's own warning" in line for line in summary), text
    assert not any("site-packages/megatron" in line or "site-packages/torch" in line for line in summary), text

    kinds = lines[grouped + 1 : lines.index(FULL_LIST, grouped)]
    assert kinds and all(re.match(r"\s*\d+x \w+ from (megatron|torch)\b", line) for line in kinds), kinds
    assert any(re.match(r"\s*\d+x UserWarning from megatron\.core\.models: Apex is not installed", k) for k in kinds)
    assert any(re.match(r"\s*\d+x FutureWarning from torch\.distributed: ", k) for k in kinds), "the ranks' warnings"
    grouped_count = int(re.search(r"(\d+) warnings from installed", lines[grouped])[1])
    assert grouped_count == sum(int(k.split("x", 1)[0]) for k in kinds), kinds
    counted = re.search(r"(\d+) warnings in ", lines[index(r"^=+ 1 failed, 2 passed")])
    assert counted, "pytest's final line counts the warnings it recorded"
