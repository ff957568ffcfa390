"""A synthetic run of four declared frameworks on four targets, as one gate run of several subjects leaves it: the
before and after of an upgrade (``legacyrl``, ``modernrl``) and two more. Each subject's reds, blocked family and
expected failure are chosen so that every kind of comparison entry appears, and their findings agree on some
targets and differ on others."""

from __future__ import annotations

from pathlib import Path

from harness.targets.matrix import Target
from tests.report_helpers import FULL_RUN, full_run_findings, junit_document, matrix_targets, summary, write_target

FOUR = ("megatron-0.13", "megatron-0.15", "megatron-0.16", "megatron-0.19")
FRAMEWORKS = {
    "legacyrl": "legacyrl.backends.megatron_utils",
    "modernrl": "modernrl.backends.megatron_utils",
    "kestrel": "kestrel.backends.megatron",
    "heron": "heron.backends.megatron",
}
LABELS = {name: f"{package} (megatron-conformance.toml)" for name, package in FRAMEWORKS.items()}
"""What the report calls each framework: its declaration's recorded label."""
IMPORT_CASE = "test_importing_the_adapter_with_real_megatron_has_no_other_effects"
KEYWORDS_CASE = "test_keywords_reach_the_inner_provider"
BLOCKER_CASE = "test_blocked"
XFAIL_CASE = "test_freeze_rules_set_after_wrapping_still_apply"
SHARED_NOTE = "the step with a GTP weight-remat group cannot run"
REDS = {
    "legacyrl": {session: {IMPORT_CASE, *([KEYWORDS_CASE] if session >= "megatron-0.16" else [])} for session in FOUR},
    "modernrl": {session: set() for session in FOUR},
    "kestrel": {session: {KEYWORDS_CASE} if session == "megatron-0.16" else set() for session in FOUR},
    "heron": {session: set() for session in FOUR},
}
"""The reds of each framework on each target: legacyrl's import on every target and its fixed-signature wrapper
where Megatron passes ``config=``; modernrl none; kestrel shares one of legacyrl's on 0.16."""


def spec(name: str) -> str:
    return f"tests/frameworks/{name}/megatron-conformance.toml"


def _case(name: str, session: str, module: str, case: str) -> tuple[str, str, str | None, dict[str, str], str]:
    if case in REDS[name][session]:
        message = f"[{session}] a red of {name} in {case}"
        return module, case, "failure", {"message": message}, message
    if name == "heron" and session == "megatron-0.15" and case == XFAIL_CASE:
        return module, case, "skipped", {"type": "pytest.xfail", "message": "listed in heron's expected failures"}, ""
    if "cuda" in case or "nccl" in case or ("gtp_remat" in case and session != "megatron-0.19"):
        return module, case, "skipped", {"type": "pytest.skip", "message": f"[{session}] cannot run here"}, ""
    return module, case, None, {}, ""


def _findings(name: str, session: str) -> list[dict[str, str]]:
    """The full run's findings; heron's step peaks at 8 bytes instead of 4, so its cells differ from the others'."""
    found = full_run_findings(session)
    if name == "heron":
        found = [
            {**f, "text": f["text"].replace("896 bytes under upstream, 4 with", "896 bytes under upstream, 8 with")}
            for f in found
        ]
    return found


def four_subject_reports(reports: Path) -> Path:
    """The four frameworks on :data:`FOUR`, one session of four subjects per target (``1-megatron-conformance`` to
    ``4-megatron-conformance``, as the gate names their folders)."""
    for session in FOUR:
        for position, name in enumerate(FRAMEWORKS, 1):
            cases = [_case(name, session, module, case) for module, names in FULL_RUN.items() for case in names]
            not_run = {"equivalence (GTP step)": SHARED_NOTE} if session != "megatron-0.19" else {}
            blocked = []
            if name == "kestrel" and session == "megatron-0.13":
                blocked.append("api-fingerprint: the subject cannot be loaded")
                not_run["api-fingerprint"] = "blocked: the subject cannot be loaded"
                blocker = f"[{session}] api-fingerprint blocked: the subject cannot be loaded"
                cases.append(("cases.test_api_fingerprint", BLOCKER_CASE, "failure", {"message": blocker}, blocker))
            advisories = [
                {
                    "family": "model-provider",
                    "case": f"cases/test_model_provider.py::{KEYWORDS_CASE}",
                    "text": f"[{session}] an advisory of {name}",
                    "repro": f"MEGATRON_CONFORMANCE_SUBJECT={spec(name)} nox -R -s {session} -- cases",
                }
            ] * (2 if name == "kestrel" else 1 if name == "legacyrl" else 0)
            record = summary(
                session,
                subject=spec(name),
                subject_kind="declaration",
                subject_label=LABELS[name],
                findings=_findings(name, session),
                advisories=advisories,
                not_run=not_run,
                blocked=blocked,
                exit_status=1 if any(REDS[name][session]) else 0,
            )
            write_target(reports / session, f"{position}-megatron-conformance", record, junit_document(cases))
    return reports


def four_targets() -> dict[str, Target]:
    """The matrix entries of :data:`FOUR`, as ``nox -s report -- <targets>`` hands them to the report."""
    known = matrix_targets()
    return {session: known[session] for session in FOUR}
