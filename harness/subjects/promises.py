"""What a loaded subject says about itself beyond the protocol: the names its provider wrapper reads freeze rules
under, the call shapes its models meet, the promises its wrapper makes, and the variable it reads its budget from.

A module subject says it with module constants; a declared subject with its declaration, which the built subject
carries as ``DECLARATION``. The cases read these answers here, never the declaration's tables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class FreezeRuleNames:
    """Where a provider wrapper reads its freeze rules from ``args``, and how a pattern applies to a name."""

    freeze: str | None = "freeze_patterns"
    train_only: str | None = "train_only_patterns"
    match: str = "search"


def required_call_shapes(subject: ModuleType, shapes: Mapping[str, Sequence[str]]) -> dict[str, Sequence[str]]:
    """The call shapes (of a target's ``provider.calls``) the subject's models meet: those its declaration names in
    ``[provider] call_shapes`` (a decoder-only framework never meets 0.13's ``encoder_decoder``), else all of them.
    The others are still checked, as advisories."""
    declaration = getattr(subject, "DECLARATION", None)
    named = declaration.provider.get("call_shapes") if declaration is not None else None
    return {name: keywords for name, keywords in shapes.items() if named is None or name in named}


def freeze_rule_names(subject: ModuleType) -> FreezeRuleNames:
    """The declaration's names for "freeze these" and "train only these"; the protocol's own for a module subject."""
    declaration = getattr(subject, "DECLARATION", None)
    if declaration is None:
        return FreezeRuleNames()
    provider = declaration.provider
    return FreezeRuleNames(provider.get("freeze"), provider.get("train_only"), provider.get("match", "search"))


@dataclass(frozen=True)
class ProviderPromises:
    """What a subject's provider wrapper promises beyond the calls Megatron makes: to forward keywords into an inner
    provider that takes ``**kwargs`` (``inner_takes_kwargs``), and to keep the freeze rules of wrappers applied one
    over another (``nested``). Where a promise is not made, the cases that check it are advisories."""

    inner_takes_kwargs: bool = True
    nested: bool = True


def provider_promises(subject: ModuleType) -> ProviderPromises:
    """The subject's ``PROVIDER_INNER_TAKES_KWARGS`` and ``PROVIDER_NESTED`` (a declared subject's ``[provider]``
    ``inner_takes_kwargs`` and ``nested``, false unless declared); a module subject that sets neither promises both,
    as a module subject is strict."""
    return ProviderPromises(
        bool(getattr(subject, "PROVIDER_INNER_TAKES_KWARGS", True)), bool(getattr(subject, "PROVIDER_NESTED", True))
    )


def budget_env_var(subject: ModuleType) -> str | None:
    """The environment variable the subject reads its budget from (``BUDGET_ENV_VAR``; a declaration's
    ``budget.env``): it may be read at import, and such a read is listed as a waiver, never reported."""
    name = getattr(subject, "BUDGET_ENV_VAR", None)
    return name if isinstance(name, str) and name else None
