"""Reading pytest's JUnit XML: the one place that knows how a ``<testcase>`` maps back to a pytest node id and a
verdict. The report, the sensitivity runner and the harness's tests all read verdicts through it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

_RED_TAGS = ("failure", "error")


@dataclass(frozen=True)
class JUnitCase:
    """One ``<testcase>``: where it lives, its verdict and the element that explains a red or a skip."""

    module: str
    """The case file, ``cases/test_chunk_splitting.py``; for a collection error, the module that failed to import."""
    classes: tuple[str, ...]
    name: str
    """The test name with its parameters, ``test_partition[2-3]``; empty for a collection error."""
    verdict: str
    """``passed``, ``failed`` (failure or error), ``xfailed`` or ``skipped``."""
    detail: ET.Element | None
    """The ``<failure>``/``<error>``/``<skipped>`` element, when there is one."""

    @property
    def nodeid(self) -> str:
        """The pytest node id, as pytest prints it and takes it back on a command line."""
        return "::".join([self.module, *self.classes, *([self.name] if self.name else [])])

    @property
    def function(self) -> str:
        """The test function (with its classes), without parameters: what parametrized ids share."""
        return "::".join([*self.classes, self.name.split("[", 1)[0]])

    @property
    def text(self) -> str:
        """The message and full text of the red or skip, empty when it passed."""
        if self.detail is None:
            return ""
        return (self.detail.get("message") or "") + "\n" + (self.detail.text or "")


def _split_classname(classname: str) -> tuple[str, tuple[str, ...]]:
    """Module path and class names of a JUnit test case; test classes are the capitalised trailing parts."""
    parts = classname.split(".")
    first_class = next((i for i, part in enumerate(parts) if part[:1].isupper()), len(parts))
    return "/".join(parts[:first_class]) + ".py", tuple(parts[first_class:])


def parse_case(element: ET.Element) -> JUnitCase:
    """One ``<testcase>`` element; a collection error (no classname) names its module in ``name``."""
    classname, name = element.get("classname", ""), element.get("name", "")
    if classname:
        module, classes = _split_classname(classname)
    else:
        module, classes, name = name.replace(".", "/") + ".py", (), ""
    red = next((child for child in element if child.tag in _RED_TAGS), None)
    skipped = next((child for child in element if child.tag == "skipped"), None)
    if red is not None:
        return JUnitCase(module, classes, name, "failed", red)
    if skipped is not None:
        verdict = "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        return JUnitCase(module, classes, name, verdict, skipped)
    return JUnitCase(module, classes, name, "passed", None)


def read_cases(path: Path) -> list[JUnitCase]:
    """Every test case of a JUnit file, in file order; none when the file does not exist (the run never got as far
    as writing it). A malformed file raises :class:`xml.etree.ElementTree.ParseError`."""
    if not path.exists():
        return []
    return [parse_case(element) for element in ET.parse(path).getroot().iter("testcase")]
