"""``python -m harness.source.from_source ROOT --megatron DIR ...``: the from-source verdicts of a
framework's replaced Megatron symbols against one Megatron tree, without importing either (no torch needed).

``DIR`` holds a ``megatron`` package: a target venv's site-packages, or a release wheel unpacked
(:mod:`harness.targets.release_source`). Prints one line per symbol; ``--json`` writes them for the report and the
project's tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from harness.source.call_sites import MegatronSource
from harness.source.framework_guards import Versions
from harness.source.framework_scan import defined, symbol_key
from harness.source.megatron_keys import megatron_key
from harness.source.replacement_fit import ReadFunction
from harness.source.source_verdicts import framework_verdicts, has_member, upstream_definition


def defines(source: MegatronSource):
    """Whether Megatron in ``source`` defines a dotted path: a module, a name one binds, or a method a class defines
    or inherits from a Megatron base (what ``hasattr`` on the class or its objects finds)."""

    def check(dotted: str) -> bool:
        base = source.root.joinpath(*dotted.split("."))
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
        key = symbol_key(dotted, [source.root])
        return key is not None and (defined(source.root, key) or has_member(source, megatron_key(dotted, source)))

    return check


def parameters(source: MegatronSource):
    """The parameter names of the Megatron function or method a dotted path names, read from ``source`` (on an
    object, its first taken): what a framework's ``inspect.signature(...).parameters`` check finds there."""

    def names(dotted: str, bound: bool) -> tuple[str, ...] | None:
        module, _, qualname = megatron_key(dotted, source).partition(":")
        node = upstream_definition(source, module, qualname) if module in source.texts else None
        return None if node is None else tuple(ReadFunction(node, bound).signature().parameters)

    return names


def built(source: MegatronSource):
    """Whether built objects of the Megatron class a dotted path names have an attribute, read from ``source``."""

    defined_here = defines(source)

    def check(dotted: str, name: str) -> bool:
        if defined_here(f"{dotted}.{name}"):
            return True
        module, _, qualname = megatron_key(dotted, source).partition(":")
        owner = source.class_named(module, qualname) if module in source.texts else None
        return owner is not None and source.has_when_built(owner, name)

    return check


def versions_of(source: MegatronSource, megatron: str, torch: str) -> Versions:
    """What a framework's own checks are read against on the target whose Megatron is ``source``."""
    return Versions(megatron, torch, defines(source), parameters(source), built(source))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.source.from_source")
    parser.add_argument("root", type=Path, help="the framework's source root (its packages below it)")
    parser.add_argument("--megatron", type=Path, required=True, help="a folder holding the megatron package")
    parser.add_argument("--megatron-version", required=True)
    parser.add_argument("--torch-version", default="2.13.0")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args(argv)
    if not (options.megatron / "megatron").is_dir():
        print(f"{options.megatron}: no megatron package there", file=sys.stderr)
        return 2
    source = MegatronSource(options.megatron)
    versions = versions_of(source, options.megatron_version, options.torch_version)
    verdicts = framework_verdicts(options.root, source, versions)
    for verdict in verdicts:
        print(verdict.line())
    if options.json:
        options.json.write_text(json.dumps([asdict(v) for v in verdicts], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
