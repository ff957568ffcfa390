"""What an install changed of the target and where installed distributions disagree with the target's torch and
megatron-core: the lines a session carries as findings.

The target's torch and megatron-core are held (:data:`HELD`); a distribution asking for others is either the
framework itself (its megatron-core range is the upgrade being checked, its torch pin is overridden) or a
dependency, which :mod:`harness.install.torch_coupled` first tries to resolve to a release that accepts them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.install.distributions import Distribution, applies

HELD = ("torch", "megatron-core")
"""What the target pins and a framework may never replace."""


@dataclass(frozen=True)
class HeldMismatch:
    """An installed distribution whose requirement on a held distribution excludes the target's version."""

    distribution: Distribution
    held: str
    requirement: Requirement

    @property
    def spec(self) -> str:
        return str(self.requirement.specifier)


def held_versions(pins: Iterable[str]) -> dict[str, str]:
    """The versions of :data:`HELD` among exact ``pins``."""
    held = {}
    for pin in pins:
        name, _, version = pin.partition("==")
        if canonicalize_name(name) in HELD:
            held[canonicalize_name(name)] = version
    return held


def framework_extras(frameworks: Iterable[str]) -> dict[str, set[str]]:
    """The extras each of the framework's own requirement strings asks for (``""``: none), by canonical name."""
    extras: dict[str, set[str]] = {}
    for text in frameworks:
        requirement = Requirement(text)
        extras.setdefault(canonicalize_name(requirement.name), {""}).update(requirement.extras)
    return extras


def held_mismatches(
    distributions: dict[str, Distribution], held: dict[str, str], extras: dict[str, set[str]], python_version: str
) -> Iterator[HeldMismatch]:
    """Each installed distribution's requirement, applying on the target's Python, that excludes a held version."""
    for name in sorted(distributions):
        distribution = distributions[name]
        if name in HELD:
            continue
        for requirement in distribution.requires:
            held_name = canonicalize_name(requirement.name)
            if held_name not in held or not applies(requirement, python_version, extras.get(name, {""})):
                continue
            if not requirement.specifier.contains(held[held_name], prereleases=True):
                yield HeldMismatch(distribution, held_name, requirement)


def moved_packages(before: Iterable[str], after: Iterable[str], held: dict[str, str]) -> list[str]:
    """One line per package of the target venv whose version the framework's install changed or removed."""
    versions = dict(pin.partition("==")[::2] for pin in after)
    versions = {canonicalize_name(name): version for name, version in versions.items()}
    moved = []
    for pin in before:
        name, _, version = pin.partition("==")
        now = versions.get(canonicalize_name(name))
        if canonicalize_name(name) not in held and now != version:
            moved.append(f"{canonicalize_name(name)} {version} → {now or 'removed'}")
    return [f"moved for the framework's requirements: {', '.join(moved)}"] if moved else []


def overridden_pins(
    distributions: dict[str, Distribution], held: dict[str, str], frameworks: Iterable[str], python_version: str
) -> list[str]:
    """Where an installed distribution asks for another torch or megatron-core than the target's: the framework's
    own megatron-core range is the upgrade being checked; any other pin is overridden."""
    extras = framework_extras(frameworks)
    lines = []
    for mismatch in held_mismatches(distributions, held, extras, python_version):
        name, version = mismatch.distribution.name, mismatch.distribution.version
        if name in extras and mismatch.held == "megatron-core":
            lines.append(
                f"megatron-core {held[mismatch.held]} is outside the range `{name}` `{version}` declares "
                f"(`{mismatch.spec}`): this is the upgrade being checked"
            )
        else:
            lines.append(
                f"{name} {version} asks for {mismatch.held}{mismatch.spec}: overridden, the target's "
                f"{held[mismatch.held]} stays"
            )
    return lines
