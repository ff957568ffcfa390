"""The options of ``nox -s sensitivity -- ...``."""

from __future__ import annotations

import argparse
from collections.abc import Iterable


def parse_arguments(argv: list[str], default_targets: Iterable[str]) -> argparse.Namespace:
    """The sensitivity session's options: ``--targets``, ``--mutants`` (ids; default all), ``--workers``."""
    parser = argparse.ArgumentParser(prog="nox -s sensitivity --", description="Run the mutant catalogue.")
    parser.add_argument("--targets", nargs="+", default=list(default_targets), metavar="SESSION")
    parser.add_argument("--mutants", nargs="+", default=None, metavar="ID")
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args(argv)
