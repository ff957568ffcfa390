"""``scan`` measured against the patch sites of a framework read by hand: which sites it finds, misses, and which
patches it reports that no site lists. ``python -m tests.first_contact SITES.json ROOT [RELEASE ...]`` prints one
line of figures and the sites missed; the sites files of the blind corpus live in ``tests/published/blind/``.

A method bound on a built object whose class its readers judged not knowable from source
(``class_knowable_from_source: false``) is found where ``scan`` lists it as unplaced at its line: a row saying the
class cannot be read, for a ``replaces with`` entry to place, is the right answer there, and a guessed class is not.

A site is found where ``scan``'s starter lists the same Megatron symbol as replaced at the same file and line (a
loop over names makes one site per name at the loop's line). A site whose symbol the reader wrote as ``?`` counts
where any replacement is listed at its line. A site naming what no release read defines (a name the framework adds
to a Megatron module or class, :func:`~harness.source.starter.replaceable`) is counted apart: by the marker rule it
gets no replaced row, so it is right where ``scan`` lists none there.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.source.object_classes import UNPLACED
from harness.source.starter import replaceable, scanned_replacements
from harness.targets.release_source import release_source

RELEASES = ("0.19.2", "0.18.2", "0.17.1", "0.16.1", "0.15.3", "0.14.0", "0.13.1")


@dataclass(frozen=True)
class Figures:
    found: list[dict]
    missed: list[dict]
    extra: list[str]
    seconds: float
    undefined: list[dict]
    """Sites naming what no release read defines."""
    listed: list[dict]
    """Those of them ``scan`` lists as replaced anyway."""

    def line(self, name: str) -> str:
        total = len(self.found) + len(self.missed)
        share = 100 * len(self.found) / total if total else 100.0
        return (
            f"{name}: {len(self.found)} of {total} sites found ({share:.0f}%), {len(self.missed)} missed, "
            f"{len(self.extra)} extra, scan {self.seconds:.1f} s; {len(self.undefined)} more name what no release "
            f"defines, {len(self.listed)} of them listed"
        )


def measure(sites_file: Path, root: Path, releases: tuple[str, ...] = RELEASES) -> Figures:
    """Scan ``root`` against ``releases``' source and match its patches to the sites of ``sites_file``."""
    sites = json.loads(sites_file.read_text())["sites"]
    trees = [release_source(version).root for version in releases]
    started = time.monotonic()
    patches = scanned_replacements(root, trees)
    seconds = time.monotonic() - started
    places = {place for place, _ in patches}
    found, missed, undefined, listed, matched = [], [], [], [], set()
    for site in sites:
        place = f"{Path(site['file']).name}:{site['line']}"
        hit = place in places if site["symbol"] == "?" else (place, site["symbol"]) in patches
        if site.get("class_knowable_from_source") is False:
            hit = hit or (place, UNPLACED) in patches  # the row that says the class cannot be read is the answer
        if site["symbol"] != "?" and not replaceable(site["symbol"], trees):
            undefined.append(site)
            listed += [site] if hit else []
        else:
            (found if hit else missed).append(site)
        matched |= {p for p in patches if p[0] == place}
    extra = sorted(f"{place} {key}" for place, key in patches - matched)
    return Figures(found, missed, extra, seconds, undefined, listed)


def main(argv: list[str]) -> int:
    sites_file, root, *releases = argv
    figures = measure(Path(sites_file), Path(root), tuple(releases) or RELEASES)
    print(figures.line(Path(sites_file).parent.name))
    for site in figures.missed:
        print(f"  missed {site['file']}:{site['line']} {site['symbol']} ({site['form']})")
    for extra in figures.extra:
        print(f"  extra {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
