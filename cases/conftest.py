"""Cases run under the gate plugin: target, subject, expected failures, repro lines, summary.json."""

from harness.plugin.gate import (  # noqa: F401
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_xdist_node_collection_finished,
    report_dir,
    subject,
    subject_name,
    target,
)
