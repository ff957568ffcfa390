"""Synthetic target sessions for the report's tests: JUnit and summary.json files as target sessions leave them,
and readers of the Markdown the report writes."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.targets.matrix import Target, load_matrix
from tests.pytest_helpers import ROOT

INSTALLED = {
    "megatron-0.13": {"python": "3.11.7", "megatron-core": "0.13.1", "torch": "2.13.0+cpu", "numpy": "1.26.4"},
    "megatron-0.15": {"python": "3.11.7", "megatron-core": "0.15.3", "torch": "2.13.0+cpu", "numpy": "1.26.4"},
    "megatron-0.16": {"python": "3.11.7", "megatron-core": "0.16.1", "torch": "2.13.0+cpu", "numpy": "2.4.6"},
    "megatron-0.17": {"python": "3.12.1", "megatron-core": "0.17.1", "torch": "2.13.0+cpu", "numpy": "2.5.5"},
    "megatron-0.18": {"python": "3.12.1", "megatron-core": "0.18.2", "torch": "2.13.0+cpu", "numpy": "2.5.5"},
    "megatron-0.19": {"python": "3.12.1", "megatron-core": "0.19.2", "torch": "2.13.0+cpu", "numpy": "2.5.5"},
}
SEEDED_SUBJECT = "harness/sensitivity/seeded/chunk_splitting_last_dropped.py"
PARTITION_MESSAGE = (
    "AssertionError: [megatron-0.15] chunk-splitting property 'partition' violated by split_into_chunks: the chunks "
    "concatenated are not the input sequence (input 2 tensors, chunks hold 2 grads / 2 params; budget 1)"
)
PARTITION_REPRO = (
    f"MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.15 -- "
    "cases/test_chunk_splitting.py::test_partition"
)
BLOB = "@reproduce_failure('6.170.17', b'AEEBQQFBAUEAQQBBAUEB')"
PARTITION_TEXT = f"""subject = <module 'seeded'>

>       assert same, violation(
E       {PARTITION_MESSAGE}
E       assert False
E       Falsifying example: test_partition(
E           subject=<module '_megatron_conformance_subject_0_chunks_last_dropped'>,
E           target=Target(session='megatron-0.15',
E            python='3.11'),
E           case=([TensorSpec(name='a', shape=(1,), dtype=torch.float32, transposed=False),
E             TensorSpec(name='b', shape=(1,), dtype=torch.float32, transposed=False)],
E            1),
E       )
E
E       You can reproduce this test case by temporarily adding {BLOB} as a decorator on your test function

cases/test_chunk_splitting.py:59: AssertionError
----------------------------- megatron-conformance -----------------------------
target megatron-0.15 | contract chunk-splitting | symbol split_into_chunks
repro: {PARTITION_REPRO}"""


def summary(session: str, **extra: object) -> dict[str, object]:
    """A session's summary.json; every session runs the seeded subject unless ``extra`` says otherwise, as one run of
    the gate leaves them."""
    return {
        "target": session,
        "subject": SEEDED_SUBJECT,
        "installed": INSTALLED[session],
        "stale_expected_failures": [],
        "exit_status": 0,
        **extra,
    }


def junit_document(cases: list[tuple[str, str, str | None, dict[str, str], str]]) -> str:
    """A pytest-like JUnit document; each case is (classname, name, child tag or None, child attributes, text)."""
    suite = ET.Element("testsuite", name="pytest")
    for classname, name, tag, attributes, text in cases:
        case = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0.1")
        if tag:
            ET.SubElement(case, tag, attributes).text = text or None
    root = ET.Element("testsuites", name="pytest tests")
    root.append(suite)
    return ET.tostring(root, encoding="unicode")


def write_target(reports: Path, session: str, summary: dict[str, object] | None, junit: str | None) -> None:
    """A session folder under ``reports`` with the files given (``None``: the session left no such file)."""
    directory = reports / session
    directory.mkdir(parents=True)
    if summary is not None:
        (directory / "summary.json").write_text(json.dumps(summary))
    if junit is not None:
        (directory / "junit.xml").write_text(junit)


def synthetic_reports(reports: Path) -> Path:
    """One subject (the seeded one) on three sessions: megatron-0.13 green with skips; megatron-0.15 red (repro,
    hypothesis), xfail, strict XPASS, setup error; megatron-0.16 a collection error and a red in a case module this
    checkout lacks; and megatron-0.9, a JUnit file but no summary (so no subject)."""
    chunks, smoke, equivalence = "cases.test_chunk_splitting", "cases.test_smoke", "cases.test_equivalence"
    write_target(
        reports,
        "megatron-0.13",
        summary("megatron-0.13", stale_expected_failures=["cases/test_gone.py"]),
        junit_document(
            [
                (chunks, "test_partition", None, {}, ""),
                (chunks, "test_alignment", None, {}, ""),
                (chunks, "test_invalid_budget_is_a_value_error[0]", None, {}, ""),
                (chunks, "test_invalid_budget_is_a_value_error[x|y]", None, {}, ""),
                (smoke, "test_installed_versions_are_the_pins", None, {}, ""),
                (
                    equivalence,
                    "test_chunked_allreduce_matches_upstream[nccl-2-2]",
                    "skipped",
                    {"type": "pytest.skip", "message": "needs 2 CUDA GPUs"},
                    "cases/test_equivalence.py:60: needs 2 CUDA GPUs",
                ),
            ]
        ),
    )
    write_target(
        reports,
        "megatron-0.15",
        summary("megatron-0.15", exit_status=1),
        junit_document(
            [
                (
                    chunks,
                    "test_partition",
                    "failure",
                    {"message": f"{PARTITION_MESSAGE}\nassert False\n[+9 more lines; full report in element text]"},
                    PARTITION_TEXT,
                ),
                (chunks, "test_alignment", "skipped", {"type": "pytest.xfail", "message": "listed"}, ""),
                (chunks, "test_invalid_budget_is_a_value_error[0]", None, {}, ""),
                (
                    chunks,
                    "test_invalid_budget_is_a_value_error[x|y]",
                    "failure",
                    {"message": "[XPASS(strict)] expected failure listed in megatron-0.15.txt"},
                    "[XPASS(strict)] expected failure listed in megatron-0.15.txt",
                ),
                (
                    smoke,
                    "test_installed_versions_are_the_pins",
                    "error",
                    {"message": 'failed on setup with "RuntimeError: no megatron"'},
                    "E   RuntimeError: no megatron\n--- megatron-conformance ---\n"
                    "target megatron-0.15 | contract smoke | symbol megatron-core\n"
                    f"repro: MEGATRON_CONFORMANCE_SUBJECT={SEEDED_SUBJECT} nox -R -s megatron-0.15 -- "
                    "cases/test_smoke.py::test_installed_versions_are_the_pins",
                ),
            ]
        ),
    )
    write_target(
        reports,
        "megatron-0.16",
        summary("megatron-0.16", exit_status=2),
        junit_document(
            [
                (chunks, "test_partition", None, {}, ""),
                (
                    "",
                    "cases.test_model_provider",
                    "error",
                    {"message": "collection failure"},
                    "ImportError: no pg_collection",
                ),
                (
                    "cases.test_future",
                    "test_new_api",
                    "failure",
                    {"message": "AssertionError: no new api"},
                    "E   AssertionError: no new api\n--- megatron-conformance ---\n"
                    "target megatron-0.16 | contract new-api | symbol thing\n"
                    "repro: nox -R -s megatron-0.16 -- cases/test_future.py::test_new_api",
                ),
            ]
        ),
    )
    write_target(reports, "megatron-0.9", None, junit_document([(chunks, "test_partition", None, {}, "")]))
    return reports


KESTREL = "tests/frameworks/kestrel/megatron-conformance.toml"
KESTREL_LABEL = "kestrel.backends.megatron (megatron-conformance.toml)"
SEVEN = tuple(f"megatron-0.{minor}" for minor in range(13, 20))
"""The seven targets of a full gate run, oldest first."""
NOT_RUN = "megatron-0.14"
"""The one of :data:`SEVEN` that leaves nothing behind in :func:`seven_target_reports` (its install failed)."""
FULL_RUN = {
    "cases.test_smoke": (
        "test_installed_versions_are_the_pins",
        "test_megatron_is_imported_from_the_installed_distribution",
        "test_torch_build_is_recorded_as_torch_reports_it",
    ),
    "cases.test_chunk_splitting": (
        "test_partition",
        "test_alignment",
        "test_budget_and_oversize_alone",
        "test_no_empty_chunks",
        "test_greedy_tightness",
        "test_bytes_use_element_size[dtype0]",
        "test_bytes_use_element_size[dtype1]",
        "test_invalid_budget_is_a_value_error[0]",
        "test_invalid_budget_is_a_value_error[1.5]",
        "test_cost_is_linear_in_tensor_count[one-long-chunk]",
    ),
    "cases.test_equivalence": (
        "test_matches_upstream_on_generated_modules[world2-tp2-gloo]",
        "test_matches_upstream_on_generated_modules[world2-tp2-nccl]",
        "test_matches_upstream_on_generated_modules[world4-tp4-gloo]",
        "test_largest_buffer_is_bounded_by_the_budget[gloo]",
        "test_largest_buffer_is_bounded_by_the_budget[cuda]",
        "test_reduces_with_upstreams_ops",
        "test_finalize_model_grads_on_a_real_gpt_model[plain-gloo]",
        "test_finalize_model_grads_on_a_real_gpt_model[plain-cuda]",
        "test_finalize_model_grads_with_gtp_remat",
    ),
    "cases.test_model_provider": (
        "test_keywords_reach_the_inner_provider",
        "test_no_keyword_the_caller_did_not_pass_reaches_the_inner_provider",
        "test_keywords_of_call_shapes_the_subject_does_not_meet_here",
        "test_freeze_rules_set_after_wrapping_still_apply",
        "test_real_gpt_model_through_the_wrapper[plain]",
        "test_real_gpt_model_through_the_wrapper[virtual_pipeline]",
    ),
    "cases.test_api_fingerprint": (
        "test_declared_symbols_exist",
        "test_declaration_covers_every_megatron_use_in_the_source",
        "test_replacements_accept_every_call_upstream_accepts",
    ),
    "cases.test_import_side_effects": (
        "test_loading_the_subject_changes_nothing",
        "test_importing_the_adapter_with_real_megatron_has_no_other_effects",
        "test_importing_the_adapter_with_only_fakes_has_no_other_effects",
        "test_install_rebinds_exactly_the_documented_names",
        "test_after_uninstall_finalize_model_grads_reaches_upstream",
    ),
}
"""A full run's cases by module, with the long names of the real case files (they set the matrix's width)."""
GTP_STEP = (
    "megatron-core 0.19.2, real step (GPTModel TP 2 + SP, a GTP weight-remat group of 2, world 2, gloo): peak 17728 "
    "bytes under upstream, 17728 with the subject; coalesced reductions the subject does not bound: "
    "_allreduce_replicated_grads_over_gtp_remat_group (17728 bytes in one buffer); not exercised here, and not "
    "replaced by the subject: _allreduce_conditional_embedding_grads, _allreduce_router_grads"
)
"""The real step's finding on 0.19.2 as a gate run recorded it: a coalesced reduction the subject leaves alone."""


def _full_run_case(session: str, module: str, name: str) -> tuple[str, str, str | None, dict[str, str], str]:
    """A case of :data:`FULL_RUN` as a CPU machine leaves it: CUDA placements skipped, the GTP step only on 0.19."""
    if "cuda" in name or "nccl" in name:
        reason = f"[{session}] equivalence: cannot run here: 0 GPU(s) found"
        return module, name, "skipped", {"type": "pytest.skip", "message": reason}, ""
    if "gtp_remat" in name and session != "megatron-0.19":
        reason = f"[{session}] equivalence: the step with a GTP weight-remat group cannot run"
        return module, name, "skipped", {"type": "pytest.skip", "message": reason}, ""
    return module, name, None, {}, ""


def full_run_findings(session: str) -> list[dict[str, str]]:
    """The equivalence family's findings as a full run records them: the real step and the largest-buffer population
    (upstream coalesces it on every release), and on 0.19 the step with a GTP weight-remat group."""
    version = INSTALLED[session]["megatron-core"]
    texts = [
        f"megatron-core {version}, real step (GPTModel TP 2 + SP, world 2, gloo): peak 896 bytes under upstream, 4 "
        "with the subject; every coalesced reduction that ran is bounded by the subject; not exercised here, and not "
        "replaced by the subject: _allreduce_conditional_embedding_grads",
        f"megatron-core {version}, the largest-buffer population (4 MiB of sequence-parallel grads): upstream "
        "coalesces all of it into one buffer (peak 4194304 bytes), the subject's call peaks at 131072",
    ]
    if session == "megatron-0.19":
        texts.insert(0, GTP_STEP)
    return [{"family": "equivalence", "text": text} for text in texts]


def _full_run_advisory(session: str) -> dict[str, str]:
    case = "cases/test_chunk_splitting.py::test_invalid_budget_is_a_value_error[1.5]"
    return {
        "family": "chunk-splitting",
        "case": case,
        "text": f"[{session}] chunk-splitting: property 'budget validation' violated by split_into_chunks: budget 1.5 "
        "raised TypeError('budget_bytes must be an int number of bytes, got 1.5'), not ValueError",
        "repro": f"MEGATRON_CONFORMANCE_SUBJECT={KESTREL} nox -R -s {session} -- '{case}'",
    }


def seven_target_reports(reports: Path) -> Path:
    """A full gate run of one declared framework on the seven targets: six green (CUDA cases skipped, one advisory,
    the equivalence findings each), and :data:`NOT_RUN` with no folder, as a failed install leaves it. Collect it with
    :func:`seven_targets` so that the last one is a column too."""
    for session in SEVEN:
        if session == NOT_RUN:
            continue
        record = summary(
            session,
            subject=KESTREL,
            subject_kind="declaration",
            subject_label=KESTREL_LABEL,
            findings=full_run_findings(session),
            advisories=[_full_run_advisory(session)],
        )
        cases = [_full_run_case(session, module, name) for module, names in FULL_RUN.items() for name in names]
        write_target(reports, session, record, junit_document(cases))
    return reports


def matrix_targets() -> dict[str, Target]:
    """The shipped matrix's targets by session, as ``nox -s report`` hands them to the report."""
    return {target.session: target for target in load_matrix(ROOT / "matrix.yaml").targets}


def seven_targets() -> dict[str, Target]:
    """The matrix entries of :data:`SEVEN`, as ``nox -s report`` hands them to the report."""
    known = matrix_targets()
    return {session: known[session] for session in SEVEN}


def _as_code_span(cell: str) -> str:
    """A cell with the report's wrapping ``<code>`` read back as the code span it stands for."""
    return re.sub(
        r"<code>(.*?)</code>",
        lambda found: (
            "`" + html.unescape(re.sub(r"\\([\\`*_\[\]~])", r"\1", found.group(1).replace("<wbr>", ""))) + "`"
        ),
        cell,
    )


def _parse_table(lines: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    split = [[_as_code_span(cell.strip()) for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return split[0][1:], {cells[0]: cells[1:] for cells in split[1:]}


def _tables(markdown: str) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Every table of a Markdown report keyed by the heading above it: column headers, and the cells of each row keyed
    by its first cell."""
    found: dict[str, list[str]] = {}
    heading = ""
    for line in markdown.splitlines():
        if line.startswith("### "):
            heading = line.removeprefix("### ")
        elif line.startswith("| "):
            found.setdefault(heading, []).append(line)
    return {heading: _parse_table(lines) for heading, lines in found.items()}


def tables(markdown: str) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Every per-case matrix of a Markdown report keyed by the heading above it (``Subject `harness.reference`
    (module)``): column headers, and the cells of each row keyed by its first cell."""
    return {heading: found for heading, found in _tables(markdown).items() if heading.startswith("Subject ")}


def summaries(markdown: str) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Every summary table (families by targets) of a Markdown report keyed by its subject (``subject
    `harness.reference` (module)``)."""
    prefix = "Summary: "
    found = _tables(markdown).items()
    return {heading.removeprefix(prefix): table for heading, table in found if heading.startswith(prefix)}


def findings(markdown: str) -> tuple[list[str], dict[str, list[str]]]:
    """The findings table of a Markdown report: targets as columns, a row per finding."""
    return _tables(markdown)["Findings: is the patch still needed, and enough?"]


def comparison(markdown: str) -> tuple[str, list[str], dict[str, list[str]]]:
    """The comparison table of a Markdown report: its baseline, targets as columns, a row per compared subject."""
    heading, (headers, rows) = next(
        (heading, found) for heading, found in _tables(markdown).items() if heading.startswith("Comparison: ")
    )
    return _as_code_span(heading.removeprefix("Comparison: each subject against ")), headers, rows


def columns(markdown: str) -> dict[str, dict[str, list[str]]]:
    """Each matrix of a Markdown report keyed by its heading: its columns by session, each the lines of its header
    under the session name."""
    found = {}
    for heading, (headers, _) in tables(markdown).items():
        split = [re.sub(r"</?sub>", "", header).split("<br>") for header in headers]
        found[heading] = {lines[0]: lines[1:] for lines in split}
    return found


def table(markdown: str) -> tuple[list[str], dict[str, list[str]]]:
    """The first per-case matrix of a Markdown report (the only one when every session ran one subject)."""
    return next(iter(tables(markdown).values()))


def failure_entry(markdown: str, anchor: str) -> str:
    """The failure- or advisory-section entry that a cell's link points at."""
    start = markdown.index(f'<a id="{anchor}"></a>')
    following = re.compile(r"\n#{2,3} ").search(markdown, start)
    return markdown[start : following.start() if following else len(markdown)]


def repro_of(entry: str) -> str:
    return re.search(r"```sh\n(.+)\n```", entry).group(1)
