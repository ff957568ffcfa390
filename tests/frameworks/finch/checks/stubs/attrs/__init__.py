"""Tiny stand-in for the `attrs` package, for finch's checks only (NOT part of finch).

Covers what finch uses: attrs.frozen, attrs.define, attrs.field(default=/factory=).
"""
import dataclasses

NOTHING = dataclasses.MISSING


def field(*, default=dataclasses.MISSING, factory=None):
    if factory is not None:
        return dataclasses.field(default_factory=factory)
    return dataclasses.field(default=default)


def define(cls=None, **kw):
    def deco(c):
        return dataclasses.dataclass(c)
    return deco(cls) if cls is not None else deco


def frozen(cls=None, **kw):
    def deco(c):
        return dataclasses.dataclass(frozen=True)(c)
    return deco(cls) if cls is not None else deco
