"""The README's promises that code can check: its two commands (the second is what CI runs, exactly), its table
of contract families, which must be the families table the markers, the sensitivity runner and the report read, its
length (a newcomer reads it in five minutes), and that every relative link of it and of docs/ lands somewhere."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

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


README_MAX_LINES = 200
README_MAX_WORDS = 2500
"""A newcomer reads the README in five minutes; reference material belongs in docs/, one link away."""


def test_readme_is_short_enough_to_read_in_five_minutes() -> None:
    """A README that grows back into a reference stops being read: the budget holds it to the newcomer's path."""
    lines, words = len(README.splitlines()), len(README.split())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"
    assert words <= README_MAX_WORDS, f"README.md has {words} words (at most {README_MAX_WORDS}): move detail to docs/"


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
EXPLICIT_ANCHOR = re.compile(r"""<a\s[^>]*?\b(?:id|name)=["']([^"']+)["']""", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"""!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+["'][^"']*["'])?\s*\)""")
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """``text`` with every fenced code block blanked (line count kept): a command or a TOML sample in a fence is
    shown as it is typed, so a bracket in it is no link and a ``#`` in it is no heading."""
    lines, fence = [], ""
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            lines.append("")
        elif opened:
            fence = opened.group(1)
            lines.append("")
        else:
            lines.append(line)
    return "\n".join(lines)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, every character but letters, digits, spaces, hyphens and underscores
    dropped, spaces made hyphens. A link's text stands for the link and HTML tags vanish, as in the rendered page."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]*>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown page offers: its headings' slugs (the second of two equal ones gets ``-1``, the third
    ``-2``, as GitHub numbers them) and explicit ``<a id="...">`` tags."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    page = prose(text)
    for line in page.splitlines():
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(f"{base}-{count}" if count else base)
    return found | set(EXPLICIT_ANCHOR.findall(page))


def links(text: str) -> list[str]:
    """The targets of a page's Markdown links and images, outside fenced code and inline code (where brackets and
    parentheses are text). Code spans are taken out per paragraph, since one may wrap onto the next line."""
    paragraphs = re.split(r"\n[ \t]*\n", prose(text))
    return [target for paragraph in paragraphs for target in LINK.findall(CODE_SPAN.sub("", paragraph))]


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` whose file does not exist (relative to ``page``), or whose anchor names no
    heading or ``<a id>`` of the Markdown file it points at. A link that moved with its section must move with it:
    this is what keeps the README's pointers into docs/ (and the pages' pointers to each other) true."""
    problems = []
    for target in links(page.read_text()):
        if target.startswith(EXTERNAL):
            continue
        name, _, anchor = target.partition("#")
        destination = (page.parent / unquote(name)) if name else page
        if not destination.exists():
            problems.append(f"{page.name}: ({target}): no file {destination}")
        elif anchor and destination.suffix == ".md" and unquote(anchor) not in anchors(destination.read_text()):
            problems.append(f"{page.name}: ({target}): no heading or <a id> {anchor!r} in {destination.name}")
    return problems


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    """The README points into docs/ for everything it leaves out: a pointer that lands nowhere loses that fact."""
    pages = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
    problems = [problem for page in pages for problem in broken_links(page)]
    assert not problems, "\n".join(problems)


def test_the_link_checker_reports_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    """Seeded: a checker that never fails proves nothing. Links in code must not count, good ones must pass."""
    (tmp_path / "other.md").write_text("# Other page\n\n## Same\n\n## Same\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Real heading\n\n"
        "[gone](missing.md) and [no such](#not-a-heading), [fine](#real-heading), [fine](other.md#same-1),\n"
        "![fine](other.md) and [fine](https://example.com/missing.md), `[code](nowhere.md)` and `a\n"
        "[wrapped code span](nowhere.md)`.\n\n"
        "```\n[fenced](nowhere.md)\n# not a heading\n```\n"
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "(missing.md): no file" in problems[0]
    assert "(#not-a-heading): no heading" in problems[1]
    assert broken_links(tmp_path / "other.md") == []


def test_anchors_follow_githubs_slug_rules() -> None:
    """The anchors must be the ones GitHub renders, or a link that passes here is dead on the repository page."""
    page = '# The `report`\'s screenshots!\n\n## Same\n\n## Same\n\n### matrix.yaml\n\n<a id="kept"></a>\n'
    assert anchors(page) == {"the-reports-screenshots", "same", "same-1", "matrixyaml", "kept"}


NOXFILE = ast.parse((REPO_ROOT / "noxfile.py").read_text())


def _noxfile_constant(name: str) -> object:
    """A constant of ``noxfile.py`` (nox's file, not importable here), read from its source."""
    for node in NOXFILE.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py defines no {name}")


def _collected(environment: dict[str, str]) -> list[str]:
    narrowing = _noxfile_constant("EVERY_TARGET_DESELECTED")
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *narrowing, "tests"]
    collected = subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    return [line for line in collected.stdout.splitlines() if "::" in line]


def test_the_readme_command_selects_the_same_tests_with_ci_set_or_not() -> None:
    """What CI runs is what the README promises a newcomer: the tests sessions never read ``CI``, and the tests
    collected under their selection are the same with ``CI=true`` and without it."""
    unset = {key: value for key, value in os.environ.items() if key != "CI"}
    in_ci = _collected({**unset, "CI": "true"})
    assert in_ci and in_ci == _collected(unset)
    reads_ci = [
        node.name
        for node in ast.walk(NOXFILE)
        if isinstance(node, ast.FunctionDef) and node.name in ("tests", "tests_all", "_run_tests", "_test_selection")
        for inner in ast.walk(node)
        if isinstance(inner, ast.Constant) and inner.value == "CI"
    ]
    assert reads_ci == [], f"the tests sessions read CI: {reads_ci}"
