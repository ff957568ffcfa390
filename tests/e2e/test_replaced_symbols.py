"""A replaced Megatron method is checked against Megatron's own calls of it in the installed source: a seeded
replacement that misses a keyword Megatron passes, or returns fewer values than Megatron unpacks, is red naming the
Megatron file and line; a replacement that forwards ``*args``/``**kwargs`` stays green; owl (copies of 0.13.1's MLA
methods, written blind) is green where its two copies call each other, with what no call site decides listed. An undo
that leaves a class attribute in place is red; lark (a router's gating set on the class, written blind) applies and
undoes exactly; dove (a config's ``__post_init__`` closure and defaults) and swift (``forward`` swapped on built
layers, checked on the real step) are green, and a seeded break of each form is red.

One warm run per target holds every subject of the module (api-fingerprint only: seconds). A Megatron mutant whose
``finalize_model_grads`` calls the all-reduce through a name bound by value is red for the reference subject: the
patch re-binds a name that call never looks up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.sensitivity.catalogue import CATALOGUE, load_catalogue
from harness.sensitivity.runner import run_sensitivity
from harness.source.call_sites import MegatronSource
from harness.source.copies import definition
from harness.targets.matrix import load_matrix
from harness.targets.release_source import release_source
from tests.pytest_helpers import ROOT, SharedRuns, on_one_target, selected_parameters, target_python

SEEDED = ROOT / "harness" / "sensitivity" / "seeded"
CORRECT = ROOT / "harness" / "sensitivity" / "correct"
RETURNS_THREE = SEEDED / "api_fingerprint_replacement_returns_three.py"
MISSING_KEYWORD = SEEDED / "api_fingerprint_replacement_missing_keyword.py"
FORWARDS = CORRECT / "api_fingerprint_replacement_forwards_kwargs.py"
UNDO_LEAVES = SEEDED / "api_fingerprint_undo_leaves_class_attribute.py"
OWL = ROOT / "tests" / "frameworks" / "owl" / "megatron-conformance.toml"
LARK = ROOT / "tests" / "frameworks" / "lark" / "megatron-conformance.toml"
POST_INIT = SEEDED / "api_fingerprint_post_init_reads_a_missing_field.py"
DOVE = ROOT / "tests" / "frameworks" / "dove" / "megatron-conformance.toml"
ONE_VALUE = SEEDED / "api_fingerprint_layer_forward_returns_one_value.py"
SWIFT = ROOT / "tests" / "frameworks" / "swift" / "megatron-conformance.toml"
STATIC_AS_METHOD = SEEDED / "api_fingerprint_static_method_bound_as_a_method.py"
STATIC_KEPT = CORRECT / "api_fingerprint_static_method_kept_static.py"
FINGERPRINT = ("cases/test_api_fingerprint.py",)
SUBJECTS = (
    RETURNS_THREE,
    MISSING_KEYWORD,
    FORWARDS,
    UNDO_LEAVES,
    OWL,
    LARK,
    POST_INIT,
    DOVE,
    ONE_VALUE,
    SWIFT,
    STATIC_AS_METHOD,
    STATIC_KEPT,
)

CALL_SITES = "test_megatrons_calls_bind_to_the_replacements"
UNPACKING = "test_megatron_unpacks_what_the_replacements_return"
SIGNATURE = "test_replacements_accept_every_call_upstream_accepts"
DECIDED = "test_what_megatron_does_with_each_replacement_is_decided"
DROPPED = "test_keywords_megatron_passes_are_read_by_the_replacements"
APPLY_UNDO = "test_the_patch_binds_each_replacement_and_undo_restores_exactly"
CONFIG = "test_megatrons_config_constructs_with_the_patch_applied"
ON_INSTANCES = "test_a_method_swapped_on_built_instances_is_reached_on_the_real_step"
COPIES = "test_upstream_bodies_are_what_each_copy_was_taken_from"
VERSIONS = {"megatron-0.15": "0.15.3", "megatron-0.19": "0.19.2"}
BLOCK_UNPACKS = {"megatron-0.15": 697, "megatron-0.19": 664}
"""Where ``TransformerBlock.forward`` unpacks ``hidden_states, context = layer(...)`` on the real step's path."""
QKV = "megatron.core.transformer.multi_latent_attention:MLASelfAttention.get_query_key_value_tensors"
MLA_FILE = "megatron/core/transformer/multi_latent_attention.py"
UNPACKS = {"megatron-0.15": (236, 3), "megatron-0.19": (345, 5)}
"""Where Megatron's own ``MultiLatentAttention.forward`` unpacks ``get_query_key_value_tensors``, and how many."""
BIAS_CALLS = {"megatron-0.15": 960, "megatron-0.19": 902}
"""Where ``TEGroupedMLP.forward`` calls its static ``self._apply_bias(...)`` with four positional arguments."""


SESSIONS = on_one_target(sorted(UNPACKS), ["megatron-0.19"])
"""0.15 too on a developer's machine; the CI job runs the newest target's calls only."""


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SharedRuns:
    sessions = [session for (session,) in selected_parameters(request, "session")]
    plan = [(session, FINGERPRINT, subject) for session in sessions for subject in SUBJECTS]
    return SharedRuns(plan, lambda: tmp_path_factory.mktemp("replaced"))


def advisories(run, key: str = "text") -> dict[str, str]:
    """Each advisory's one line by case (``key="detail"``: the whole message where it says more)."""
    assert run.report_dir is not None
    summary = json.loads((run.report_dir / "summary.json").read_text())
    return {a["case"].split("::")[-1]: a.get(key, "") for a in summary["advisories"]}


@pytest.mark.parametrize("session", SESSIONS)
def test_a_replacement_returning_fewer_values_than_megatron_unpacks_is_red_naming_the_line(
    session: str, runs: SharedRuns
) -> None:
    run = runs.run(session, FINGERPRINT, RETURNS_THREE)
    line, count = UNPACKS[session]
    if count == 3:
        assert run.returncode == 0, f"three values where {session} unpacks three: {run.failed()}"
        return
    failed = run.require_red("returns three")
    assert set(failed) == {UNPACKING}, sorted(failed)
    assert (
        f"{QKV}: {MLA_FILE}:{line} (MultiLatentAttention.forward) unpacks {count} values, get_query_key_value_tensors "
        "returns 3"
    ) in failed[UNPACKING], failed[UNPACKING][-2000:]


@pytest.mark.parametrize("session", SESSIONS)
def test_a_replacement_missing_a_keyword_megatron_passes_is_red_naming_the_line(session: str, runs: SharedRuns) -> None:
    run = runs.run(session, FINGERPRINT, MISSING_KEYWORD)
    failed = run.require_red("missing keyword")
    line, count = UNPACKS[session]
    # The seeded subject is strict, so the signature advisory is red beside the mandatory call-site red; it returns
    # five values, a red of its own where Megatron unpacks three.
    assert set(failed) == {CALL_SITES, SIGNATURE} | ({UNPACKING} if count == 3 else set()), sorted(failed)
    assert (
        f"{QKV}: Megatron's call at {MLA_FILE}:{line} (MultiLatentAttention.forward: 4 positional, "
        "inference_context=) does not bind to get_query_key_value_tensors: got an unexpected keyword argument "
        "'inference_context'"
    ) in failed[CALL_SITES], failed[CALL_SITES][-2000:]


@pytest.mark.parametrize("session", SESSIONS)
def test_a_replacement_forwarding_args_and_kwargs_is_green(session: str, runs: SharedRuns) -> None:
    run = runs.run(session, FINGERPRINT, FORWARDS)
    assert run.returncode == 0, run.failed()
    advised = advisories(run)
    line, _ = UNPACKS[session]
    assert set(advised) == {DECIDED}, advised
    assert f"{MLA_FILE}:{line} unpack its result; how many values" in advised[DECIDED], advised[DECIDED]


@pytest.mark.parametrize("session", SESSIONS)
def test_an_undo_that_leaves_a_class_attribute_in_place_is_red(session: str, runs: SharedRuns) -> None:
    failed = runs.run(session, FINGERPRINT, UNDO_LEAVES).require_red("undo leaves a class attribute")
    assert set(failed) == {APPLY_UNDO}, sorted(failed)
    assert (
        "after undo, TopKRouter.gating: added (megatron.core.transformer.moe.router.Router.gating), not there before "
        "apply"
    ) in failed[APPLY_UNDO], failed[APPLY_UNDO][-2000:]


@pytest.mark.parametrize("session", SESSIONS)
def test_lark_is_green_applied_and_undone_through_its_own_functions(session: str, runs: SharedRuns) -> None:
    """lark sets ``TopKRouter.gating`` (inherited from ``Router``) on the class and deletes it on undo; Megatron's
    ``TopKRouter.forward`` calls ``self.gating(input)`` and takes one value."""
    run = runs.run(session, FINGERPRINT, LARK)
    assert run.returncode == 0, run.failed()
    assert run.verdicts[APPLY_UNDO][0] == "passed" and run.verdicts[CALL_SITES][0] == "passed", run.verdicts


@pytest.mark.parametrize("session", SESSIONS)
def test_owl_is_green_where_its_copies_call_each_other(session: str, runs: SharedRuns) -> None:
    """owl replaces ``forward`` too, so Megatron's unpacking line is inside a replaced method: the copy's own call
    (three values, which the other copy returns) is what is checked. Its forward takes ``**kwargs`` and reads them
    (it refuses any value set), so nothing is dropped; Megatron calls forward through ``nn.Module.__call__``
    (``self.self_attention(...)`` in ``TransformerLayer``, whose MLA spec names the class), a call site the copy
    fits."""
    run = runs.run(session, FINGERPRINT, OWL)
    assert run.returncode == 0, run.failed()
    assert run.verdicts[APPLY_UNDO][0] == "passed", run.verdicts[APPLY_UNDO]
    advised = advisories(run)
    assert DROPPED not in advised and DECIDED not in advised and COPIES in advised, advised
    assert run.report_dir is not None
    symbols = json.loads((run.report_dir / "replaced_symbols.json").read_text())["symbols"]
    forward = next(s for s in symbols if s["symbol"].endswith(":MultiLatentAttention.forward"))
    assert (forward["how"], forward["verdict"], forward["from_source"]) == ("applied", "fits", "fits"), forward


@pytest.mark.parametrize("session", SESSIONS)
def test_owls_copies_show_what_upstream_changed_since_0_13_1(session: str, runs: SharedRuns) -> None:
    """owl declares both copies ``copied_from = "0.13.1"``: the advisory carries the unified diff of upstream's body
    between 0.13.1 and the target, and ``copies/`` holds each diff whole."""
    run = runs.run(session, FINGERPRINT, OWL)
    text = advisories(run, "detail")[COPIES]
    assert f"{QKV}: upstream's body changed between 0.13.1 (copied; read from " in text, text[:2000]
    assert f"--- megatron-core 0.13.1: {MLA_FILE}:352\n+++ megatron-core {VERSIONS[session]}: {MLA_FILE}:" in text
    assert run.report_dir is not None
    copies = json.loads((run.report_dir / "copies.json").read_text())["copies"]
    changed = {copy["symbol"].rpartition(".")[2] for copy in copies if copy["changed"]}
    assert changed == {"forward", "get_query_key_value_tensors"}, copies
    for copy in copies:
        whole = Path(copy["diff"]).read_text()
        assert whole.startswith(f"--- megatron-core 0.13.1: {copy['then']}\n") and "\n@@ " in whole, whole[:300]


def test_megatron_calling_the_replaced_function_by_a_captured_name_is_red() -> None:
    session = "megatron-0.15"
    known = [target.session for target in load_matrix(ROOT / "matrix.yaml").targets]
    mutants = [m for m in load_catalogue(CATALOGUE, known) if m.id == "finalize_calls_a_captured_reduction"]
    assert mutants, "the catalogue lost finalize_calls_a_captured_reduction"
    report = run_sensitivity(mutants, {session: target_python(session)}, "harness.reference", 2, print)
    (outcome,) = report.outcomes
    assert outcome.verdict == "killed" and not outcome.note, outcome
    assert f"{FINGERPRINT[0]}::test_megatrons_calls_reach_the_replacements" in outcome.caught_by, outcome


@pytest.mark.parametrize("session", SESSIONS)
def test_a_post_init_patch_reading_a_missing_field_is_red_on_the_config_megatron_builds(
    session: str, runs: SharedRuns
) -> None:
    failed = runs.run(session, FINGERPRINT, POST_INIT).require_red("post-init reads a missing field")
    assert set(failed) == {CONFIG}, sorted(failed)
    assert "raised AttributeError: 'TransformerConfig' object has no attribute 'dropout_schedule'" in failed[CONFIG]


@pytest.mark.parametrize("session", SESSIONS)
def test_dove_is_green_its_closure_captured_and_its_defaults_restored(session: str, runs: SharedRuns) -> None:
    """dove wraps ``__post_init__`` in a closure made inside its apply (declared bare ``replaces``, captured) and
    changes two dropout defaults in the fields, the class and every generated ``__init__``; its undo restores each
    object, which the check compares default by default. Megatron's subclasses call ``super().__post_init__()``."""
    run = runs.run(session, FINGERPRINT, DOVE)
    assert run.returncode == 0, run.failed()
    for case in (APPLY_UNDO, CONFIG, CALL_SITES):
        assert run.verdicts[case][0] == "passed", (case, run.verdicts[case])


@pytest.mark.parametrize("session", SESSIONS)
def test_a_layer_forward_returning_one_value_is_red_naming_megatrons_unpacking_line(
    session: str, runs: SharedRuns
) -> None:
    failed = runs.run(session, FINGERPRINT, ONE_VALUE).require_red("layer forward returns one value")
    assert set(failed) == {ON_INSTANCES}, sorted(failed)
    line = BLOCK_UNPACKS[session]
    assert (
        "the step with the patch applied raised ValueError: too many values to unpack (expected 2) (at "
        f"megatron/core/transformer/transformer_block.py:{line}, in forward)"
    ) in failed[ON_INSTANCES], failed[ON_INSTANCES][-2000:]


@pytest.mark.parametrize("session", SESSIONS)
def test_swift_is_green_its_forward_swapped_on_every_built_layer(session: str, runs: SharedRuns) -> None:
    """swift swaps ``forward`` on each built ``TransformerLayer`` (a closure per layer, passing everything through)
    and deletes it on undo: every layer is reached by the step, and each instance is left as it was."""
    run = runs.run(session, FINGERPRINT, SWIFT)
    assert run.returncode == 0, run.failed()
    assert run.verdicts[ON_INSTANCES][0] == "passed", run.verdicts[ON_INSTANCES]


def test_a_release_no_target_venv_has_is_fetched_once_from_the_index(tmp_path: Path) -> None:
    """The wheel of a release no venv holds is unpacked into the cache from the configured index, then read from
    there; the definition a copy would be diffed against is found in it."""
    fetched = release_source("0.14.0", venvs=tmp_path / "no-venvs", cache=tmp_path / "cache")
    unpacked = tmp_path / "cache" / "megatron-core-0.14.0"
    assert fetched.origin == f"its wheel, fetched from the package index into {unpacked}" and fetched.root == unpacked
    found = definition(MegatronSource(fetched.root), QKV)
    assert found is not None and found.place.startswith(f"{MLA_FILE}:") and found.text.startswith("def ")
    again = release_source("0.14.0", venvs=tmp_path / "no-venvs", cache=tmp_path / "cache")
    assert again.root == fetched.root and again.origin.startswith("its wheel, cached in ")


@pytest.mark.parametrize("session", SESSIONS)
def test_a_static_method_replaced_by_a_plain_function_is_red_naming_megatrons_call(
    session: str, runs: SharedRuns
) -> None:
    """Bound on the class as a plain function, the replacement gets the instance first from Megatron's call."""
    failed = runs.run(session, FINGERPRINT, STATIC_AS_METHOD).require_red("static method bound as a method")
    assert set(failed) == {CALL_SITES}, sorted(failed)
    assert (
        "megatron.core.transformer.moe.experts:TEGroupedMLP._apply_bias: Megatron's call at "
        f"megatron/core/transformer/moe/experts.py:{BIAS_CALLS[session]} (TEGroupedMLP.forward: 4 positional) does "
        "not bind to apply_bias: too many positional arguments"
    ) in failed[CALL_SITES], failed[CALL_SITES][-2000:]


@pytest.mark.parametrize("session", SESSIONS)
def test_a_static_method_replaced_by_a_static_method_is_green(session: str, runs: SharedRuns) -> None:
    run = runs.run(session, FINGERPRINT, STATIC_KEPT)
    assert run.returncode == 0, run.failed()
    for case in (CALL_SITES, APPLY_UNDO):
        assert run.verdicts[case][0] == "passed", (case, run.verdicts[case])
