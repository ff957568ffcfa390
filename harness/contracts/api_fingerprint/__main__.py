"""``python -m harness.contracts.api_fingerprint --session S --subject X --cache-dir D --out F``: run by
:mod:`harness.reports.api_diff` with each target's own interpreter."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from harness.contracts.api_fingerprint.cache import cached_fingerprint, write_json
from harness.source.symbol_table import DeclarationError, declared_symbols, read_declaration
from harness.subjects.declaration import DeclarationFileError
from harness.subjects.loading import SubjectError, load_subject


def main(argv: list[str] | None = None) -> int:
    """Fingerprint a subject's declared symbols in this interpreter and write them to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m harness.contracts.api_fingerprint", description=main.__doc__)
    parser.add_argument("--session", required=True, help="target session this interpreter belongs to")
    parser.add_argument("--subject", required=True, help="subject module or path")
    parser.add_argument("--cache-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        declaration = read_declaration(load_subject(args.subject))
    except (DeclarationError, DeclarationFileError, SubjectError) as err:
        print(f"target {args.session}: {err}", file=sys.stderr)
        return 2
    record = cached_fingerprint(declared_symbols(declaration), args.session, args.cache_dir)
    record["subject"] = args.subject
    record["declaration"] = [dataclasses.asdict(entry) for entry in declaration]
    write_json(args.out, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
