"""``python -m harness.contracts.api_fingerprint.from_source ROOT --megatron DIR ...``: the from-source verdicts of a
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

from harness.contracts.api_fingerprint.call_sites import MegatronSource
from harness.contracts.api_fingerprint.framework_guards import Versions
from harness.contracts.api_fingerprint.framework_scan import defined, symbol_key
from harness.contracts.api_fingerprint.source_verdicts import framework_verdicts


def defines(tree: Path):
    """Whether Megatron in ``tree`` defines a dotted path: a module, or a name one binds."""

    def check(dotted: str) -> bool:
        base = tree.joinpath(*dotted.split("."))
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
        key = symbol_key(dotted, [tree])
        return key is not None and defined(tree, key)

    return check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.contracts.api_fingerprint.from_source")
    parser.add_argument("root", type=Path, help="the framework's source root (its packages below it)")
    parser.add_argument("--megatron", type=Path, required=True, help="a folder holding the megatron package")
    parser.add_argument("--megatron-version", required=True)
    parser.add_argument("--torch-version", default="2.13.0")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args(argv)
    if not (options.megatron / "megatron").is_dir():
        print(f"{options.megatron}: no megatron package there", file=sys.stderr)
        return 2
    versions = Versions(options.megatron_version, options.torch_version, defines(options.megatron))
    verdicts = framework_verdicts(options.root, MegatronSource(options.megatron), versions)
    for verdict in verdicts:
        print(verdict.line())
    if options.json:
        options.json.write_text(json.dumps([asdict(v) for v in verdicts], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
