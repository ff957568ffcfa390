"""Megatron mutants imported again in a process that had imported Megatron (:mod:`harness.targets.in_place_mutant`), on
a real target venv: the session and the ranks of the fork server forked after it run the edited text, ``inspect``
reads it, a module imported later comes from it too, and a mutant that edits other files than modules falls back to
a copied package and is still caught."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

from harness.sensitivity.catalogue import Edit, Mutant
from harness.sensitivity.mutate import installed_package, mutated_sources
from harness.sensitivity.runner import run_sensitivity
from harness.targets.megatron_names import FINALIZE_MODULE
from tests.e2e.test_sensitivity import applicable
from tests.pytest_helpers import ROOT, target_python

SESSION = "megatron-0.15"
UPSTREAM = "_allreduce_non_tensor_model_parallel_grads"
GPT_MODULE = "megatron.core.models.gpt.gpt_model"

_IN_PLACE = textwrap.dedent(
    f"""
    import importlib, inspect, json, sys
    from harness.ranks import fork_server, pool, preload
    from harness.targets.in_place_mutant import apply_in_place
    from tests import rank_tasks

    before = sys.modules["{FINALIZE_MODULE}"]
    apply_in_place("probe", json.load(open(sys.argv[1])))
    after = importlib.import_module("{FINALIZE_MODULE}")
    fork_server.fork_fork_server()
    print(json.dumps({{
        "new_module": after is not before,
        "session": inspect.getsource(getattr(after, "{UPSTREAM}")),
        "ranks": pool.RankPool(2).run(rank_tasks.source_of, "{FINALIZE_MODULE}", "{UPSTREAM}"),
        "imported_later": inspect.getsource(importlib.import_module("{GPT_MODULE}").GPTModel.__init__),
        "megatron_import_timed": preload.MEGATRON_IMPORT_NS is not None,
    }}))
    pool.close_all_pools()
    """
)


def test_the_session_and_its_ranks_run_the_edited_modules(tmp_path: Path) -> None:
    [swapped] = applicable(("sum_avg_swapped",), SESSION)
    [renamed] = applicable(("gpt_process_group_keyword_renamed",), SESSION)
    python = target_python(SESSION)
    package = installed_package(python)
    sources = {**mutated_sources(swapped, package), **mutated_sources(renamed, package)}
    (tmp_path / "sources.json").write_text(json.dumps(sources))
    done = subprocess.run(
        [str(python), "-c", _IN_PLACE, str(tmp_path / "sources.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    edited, gpt_edited = swapped.edits[0].replace, renamed.edits[0].replace
    assert seen["new_module"] and seen["megatron_import_timed"], seen
    assert edited in seen["session"] and swapped.edits[0].find not in seen["session"]
    assert all(edited in source for source in seen["ranks"]), "the ranks of the forked server run the installed text"
    assert gpt_edited in seen["imported_later"], "a module first imported after the mutant is not the edited one"


def test_a_mutant_that_edits_more_than_modules_runs_on_a_copy_and_is_caught() -> None:
    """The README beside ``megatron.core`` is no module: the mutant runs on a copied package, cold, as before."""
    [swapped] = applicable(("sum_avg_swapped",), SESSION)
    readme = Edit("core/README.md", "Megatron", "Megatron (mutated)", count=_count("core/README.md", "Megatron"))
    mutant = Mutant("swapped_with_readme", "megatron", (SESSION,), "w", "equivalence", edits=(*swapped.edits, readme))
    report = run_sensitivity([mutant], {SESSION: target_python(SESSION)}, "harness.reference", 1, print)
    [outcome] = report.outcomes
    assert outcome.verdict == "killed" and outcome.caught_by and not outcome.note, outcome


def _count(file: str, text: str) -> int:
    return (installed_package(target_python(SESSION)) / file).read_text().count(text)
