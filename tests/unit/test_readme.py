"""The README's promises that code can check: its two commands (the second is what CI runs, exactly), and its table
of contract families, which must be the families table the markers, the sensitivity runner and the report read."""

from __future__ import annotations

import re

from harness import REPO_ROOT
from harness.plugin.families import FAMILIES

README = (REPO_ROOT / "README.md").read_text()


def first_block_commands() -> list[str]:
    block = re.search(r"```\n(.*?)\n```", README, re.DOTALL)
    assert block, "README.md has no command block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]


def test_readme_starts_with_the_gate_and_the_tests_command() -> None:
    gate, tests = first_block_commands()
    assert gate.endswith("nox -s megatron-0.13 megatron-0.15") and tests.endswith("nox -s tests")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    _, tests = first_block_commands()
    lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()]
    assert tests in lines, f".ci/run does not run {tests!r}"
    commands = [line for line in lines if line and not line.startswith(("#", "echo"))]
    assert not [line for line in commands if "apt-get" in line or ("nox" in line and line != tests)], commands


def test_the_contracts_table_is_the_families_table() -> None:
    section = README.split("## Contracts", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([\w-]+) \| `([^`]+)` \|", section, re.MULTILINE)
    assert rows == [(family.name, family.case_file) for family in FAMILIES]
