"""The ``MEGATRON_SYMBOLS`` format, read by the api-fingerprint family and checked when a declaration file is read
(``[megatron_symbols]``), so that a misspelt usage is refused where it is written.

::

    {
        "<module>:<qualname>": "<usage>",                       # usage: imports, calls, reads, relies
        "<module>:<qualname>": "replaces with <subject name>",  # the subject's drop-in replacement of it
        "<module>:<qualname>": "replaces with <module>:<qualname>",  # the framework's own function, by its own name
        "<module>:<qualname>": "replaces",                      # whatever the declared apply binds there (a closure)
        "<module>:<qualname>": "calls, optional",               # may be absent on a target
        "<module>:<a> | <module>:<b>": "reads",                 # alternatives: one must exist, the first present wins
    }

The rest of the declaration's handling (what the fingerprint records, the source scan) is the api-fingerprint
family's: :mod:`harness.source.symbol_table`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

_DECLARATION_NAME = "MEGATRON_SYMBOLS"
COPIED_FROM_NAME = "COPIED_FROM"
RELEASE = re.compile(r"^\d+(\.\d+){1,3}((a|b|rc)\d+)?(\.post\d+)?$")
"""A megatron-core release as the package index names it: ``0.13.1``, ``0.15.0rc4``."""
_USAGES = ("imports", "calls", "reads", "replaces", "relies")
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
SYMBOL = re.compile(rf"^({_DOTTED}):({_DOTTED})$")
"""``module:qualname``, both dotted."""
_USAGE = re.compile(
    rf"^(?P<usage>[a-z]+)(?: with (?P<replacement>{_DOTTED}:{_DOTTED}|[A-Za-z_]\w*))?(?P<optional>, optional)?$"
)


class DeclarationError(ValueError):
    """A ``MEGATRON_SYMBOLS`` that cannot be used; the message names the entry. ``key`` is the entry's key (``None``
    when the mapping as a whole is wrong) and ``reason`` what is wrong with it, for a declaration file to report
    against its own key."""

    def __init__(self, message: str, key: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.key, self.reason = key, reason or message


def _entry_error(key: object, reason: str) -> DeclarationError:
    return DeclarationError(f"{_DECLARATION_NAME}[{key!r}]: {reason}", str(key), reason)


@dataclasses.dataclass(frozen=True)
class Declared:
    """One declaration entry: a symbol, or alternatives of which one must exist (the first present is the one used)."""

    key: str
    members: tuple[str, ...]
    usage: str
    optional: bool = False
    replacement: str | None = None


def parse_declaration(raw: object) -> list[Declared]:
    """Validate a ``MEGATRON_SYMBOLS`` mapping; raise :class:`DeclarationError` on the first bad entry."""
    if not isinstance(raw, dict) or not raw:
        raise DeclarationError(f"{_DECLARATION_NAME} must be a non-empty dict of symbol -> usage, got {raw!r:.80}")
    entries: list[Declared] = []
    owner: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise _entry_error(key, "keys and values must be strings")
        members = tuple(member.strip() for member in key.split("|"))
        for member in members:
            if not SYMBOL.match(member):
                raise _entry_error(key, f"{member!r} is not of the form module:qualname")
            if member in owner:
                raise _entry_error(key, f"{member} is already declared by {owner[member]!r}")
            owner[member] = key
        usage, replacement, optional = parse_usage(key, value)
        entries.append(Declared(key, members, usage, optional, replacement))
    return entries


def parse_usage(key: str, value: str) -> tuple[str, str | None, bool]:
    """``(usage, replacement, optional)`` of one entry's usage text; a :class:`DeclarationError` naming the entry
    when it is not one (a misspelt word would otherwise pass as a symbol the subject never checks)."""
    match = _USAGE.match(value.strip())
    if not match or match["usage"] not in _USAGES:
        raise _entry_error(
            key,
            f"{value!r} is not a usage: expected one of {', '.join(_USAGES)}, 'replaces with <subject name>' or "
            "'replaces with <module>:<qualname>', "
            "optionally followed by ', optional'",
        )
    if match["usage"] != "replaces" and match["replacement"] is not None:
        raise _entry_error(key, f"{value!r}: 'with <subject name>' goes with 'replaces' and only there")
    return match["usage"], match["replacement"], bool(match["optional"])


def parse_copied_from(raw: object, declaration: Iterable[Declared]) -> dict[str, str]:
    """Validate a ``COPIED_FROM`` mapping against the parsed ``MEGATRON_SYMBOLS``: each key a symbol the subject
    replaces, each value a release; :class:`DeclarationError` on the first bad entry."""
    if not isinstance(raw, dict):
        raise DeclarationError(f"{COPIED_FROM_NAME} must be a dict of symbol -> megatron-core release, got {raw!r:.80}")
    replaced = {member for entry in declaration if entry.usage == "replaces" for member in entry.members}
    copies: dict[str, str] = {}
    for key, value in raw.items():
        if key not in replaced:
            raise DeclarationError(
                f"{COPIED_FROM_NAME}[{key!r}]: not a symbol {_DECLARATION_NAME} says the subject replaces",
                str(key),
                "a copy is of a symbol the subject replaces: declare it 'replaces' in megatron_symbols",
            )
        if not isinstance(value, str) or not RELEASE.match(value):
            raise DeclarationError(
                f"{COPIED_FROM_NAME}[{key!r}] = {value!r:.80}: expected a megatron-core release such as '0.13.1'",
                str(key),
                f"{value!r:.80} is not a megatron-core release such as '0.13.1'",
            )
        copies[key] = value
    return copies
