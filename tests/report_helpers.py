"""Synthetic target sessions for the report's tests: JUnit and summary.json files as target sessions leave them,
and readers of the Markdown the report writes."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

INSTALLED = {
    "megatron-0.13": {"python": "3.11.7", "megatron-core": "0.13.1", "torch": "2.13.0+cpu", "numpy": "1.26.4"},
    "megatron-0.15": {"python": "3.11.7", "megatron-core": "0.15.3", "torch": "2.13.0+cpu", "numpy": "1.26.4"},
    "megatron-0.16": {"python": "3.11.7", "megatron-core": "0.16.1", "torch": "2.13.0+cpu", "numpy": "2.4.6"},
}
SEEDED_SUBJECT = "harness/sensitivity/seeded/chunk_splitting_reversed.py"
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
E           subject=<module '_megatron_conformance_subject_0_chunks_reversed'>,
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


def _parse_table(lines: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    split = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    return split[0][1:], {cells[0]: cells[1:] for cells in split[1:]}


def tables(markdown: str) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Every matrix of a Markdown report keyed by the heading above it (``Subject `harness.reference` (module)``):
    column headers, and the cells of each row keyed by its first cell."""
    found: dict[str, list[str]] = {}
    heading = ""
    for line in markdown.splitlines():
        if line.startswith("### "):
            heading = line.removeprefix("### ")
        elif line.startswith("| "):
            found.setdefault(heading, []).append(line)
    return {heading: _parse_table(lines) for heading, lines in found.items()}


def columns(markdown: str) -> dict[str, dict[str, list[str]]]:
    """Each matrix of a Markdown report keyed by its heading: its columns by session, each the lines of its header
    under the session name."""
    found = {}
    for heading, (headers, _) in tables(markdown).items():
        split = [re.sub(r"</?sub>", "", header).split("<br>") for header in headers]
        found[heading] = {lines[0]: lines[1:] for lines in split}
    return found


def table(markdown: str) -> tuple[list[str], dict[str, list[str]]]:
    """The first matrix of a Markdown report (the only one when every session ran one subject)."""
    return next(iter(tables(markdown).values()))


def failure_entry(markdown: str, anchor: str) -> str:
    """The failure- or advisory-section entry that a cell's link points at."""
    start = markdown.index(f'<a id="{anchor}"></a>')
    following = re.compile(r"\n#{2,3} ").search(markdown, start)
    return markdown[start : following.start() if following else len(markdown)]


def repro_of(entry: str) -> str:
    return re.search(r"```sh\n(.+)\n```", entry).group(1)
