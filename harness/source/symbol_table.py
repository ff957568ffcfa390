"""The subject's symbol table, ``MEGATRON_SYMBOLS``: every Megatron symbol the subject touches, and how it uses each.

Declaration format (``MEGATRON_SYMBOLS`` in the subject module)::

    {
        "<module>:<qualname>": "<usage>",                       # usage: imports, calls, reads, relies
        "<module>:<qualname>": "replaces with <subject name>",  # the subject's drop-in replacement of it
        "<module>:<qualname>": "calls, optional",               # may be absent on a target
        "<module>:<a> | <module>:<b>": "reads",                 # alternatives: one must exist, the first present wins
    }

``relies`` names upstream code the subject depends on without calling it (``finalize_model_grads`` looks the replaced
name up at call time). The entries are parsed by :mod:`harness.formats.megatron_symbols` (re-exported here), which a
declaration file's ``[megatron_symbols]`` is checked with when it is read; the declaration is checked against the
subject's source (:mod:`harness.source.source_scan`).

A subject whose code is a copy of an upstream function may also declare the body it copied, optionally
(``UPSTREAM_BODY_HASHES`` in the subject module, ``[upstream_body_hashes]`` in a declaration file)::

    {"<module>:<qualname>": "<body hash>"}   # the hash of the function as it was copied

The hash is the fingerprint's own (:func:`harness.contracts.api_fingerprint.inspection.body_hash`: 16 hex digits, as
``reports/<session>/fingerprint.json`` and the api-fingerprint red print it); the contract goes red on a target whose
installed body hashes otherwise.

A replacement that is a copy of upstream's function as one release had it may say which release
(``COPIED_FROM`` in the subject module; ``copied_from`` beside the symbol in ``[megatron_symbols]``, or a
``[copied_from]`` table, in a declaration file)::

    {"<module>:<qualname>": "0.13.1"}   # a symbol the subject replaces, and the megatron-core release it copied

An advisory then shows the unified diff of upstream's body between that release and the target
(:mod:`harness.source.copies`); it is red only where a body hash is declared.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from types import ModuleType

from harness.formats.megatron_symbols import (
    COPIED_FROM_NAME,
    SYMBOL,
    DeclarationError,
    Declared,
    parse_copied_from,
    parse_declaration,
    parse_usage,
)

_DECLARATION_NAME = "MEGATRON_SYMBOLS"
BODY_HASHES_NAME = "UPSTREAM_BODY_HASHES"
_BODY_HASH = re.compile(r"^[0-9a-f]{16}$")

__all__ = [
    "BODY_HASHES_NAME",
    "COPIED_FROM_NAME",
    "DeclarationError",
    "Declared",
    "declared_symbols",
    "dotted",
    "parse_body_hashes",
    "parse_copied_from",
    "parse_declaration",
    "parse_usage",
    "read_body_hashes",
    "read_copied_from",
    "read_declaration",
]


def read_declaration(subject: ModuleType) -> list[Declared]:
    """The subject's parsed ``MEGATRON_SYMBOLS``; a :class:`DeclarationError` when it has none or a bad one."""
    if not hasattr(subject, _DECLARATION_NAME):
        raise DeclarationError(
            f"subject {subject.__name__!r} declares no {_DECLARATION_NAME}: name every Megatron symbol it imports, "
            "calls, replaces or reads (format: harness/source/symbol_table.py)"
        )
    return parse_declaration(getattr(subject, _DECLARATION_NAME))


def declared_symbols(declaration: Iterable[Declared]) -> list[str]:
    """Every declared symbol, alternatives included, in declaration order."""
    return [member for entry in declaration for member in entry.members]


def dotted(symbol: str) -> str:
    """``module:qualname`` as one dotted path, the form source uses are compared in."""
    return symbol.replace(":", ".")


def parse_body_hashes(raw: object) -> dict[str, str]:
    """Validate an ``UPSTREAM_BODY_HASHES`` mapping; raise :class:`DeclarationError` on the first bad entry."""
    if not isinstance(raw, dict):
        raise DeclarationError(f"{BODY_HASHES_NAME} must be a dict of symbol -> body hash, got {raw!r:.80}")
    hashes: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not SYMBOL.match(key):
            raise DeclarationError(f"{BODY_HASHES_NAME}[{key!r}]: the key is not of the form module:qualname")
        if not isinstance(value, str) or not _BODY_HASH.match(value):
            raise DeclarationError(
                f"{BODY_HASHES_NAME}[{key!r}] = {value!r:.80}: expected the fingerprint's body hash, 16 lowercase hex "
                "digits (harness.contracts.api_fingerprint.inspection.body_hash of the function as copied)"
            )
        hashes[key] = value
    return hashes


def read_body_hashes(subject: ModuleType) -> dict[str, str]:
    """The subject's parsed ``UPSTREAM_BODY_HASHES``; empty when it declares none (the check is opt-in)."""
    return parse_body_hashes(getattr(subject, BODY_HASHES_NAME, {}))


def read_copied_from(subject: ModuleType, declaration: Iterable[Declared]) -> dict[str, str]:
    """The subject's parsed ``COPIED_FROM``; empty when it declares none."""
    return parse_copied_from(getattr(subject, COPIED_FROM_NAME, {}), declaration)
