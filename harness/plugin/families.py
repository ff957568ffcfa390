"""The contract families: one table that the case files' markers, the sensitivity catalogue, the report and the
README's list all read, so a family has one name everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from harness.subjects.declaration import Declaration


@dataclass(frozen=True)
class Family:
    """One contract family: its name (marker, catalogue, report row, README), its case file, the subject symbol it
    checks, and the role: the table a declaration must have for the family to run (``None``: it runs on every
    subject)."""

    name: str
    case_file: str
    symbol: str
    role: str | None = None

    def missing_role(self, declaration: Declaration) -> str | None:
        """The role this family needs that ``declaration`` leaves empty, or ``None`` when the family can run."""
        return self.role if self.role and not getattr(declaration, self.role) else None

    def mark(self) -> pytest.MarkDecorator:
        """The ``contract`` marker a case module sets as its ``pytestmark`` (pytest is imported here, not at module
        level: the noxfile reads this table in nox's own interpreter, which has no pytest)."""
        import pytest

        return pytest.mark.contract(self.name, symbol=self.symbol)


FAMILIES = (
    Family("smoke", "cases/test_smoke.py", "megatron-core"),
    Family("chunk-splitting", "cases/test_chunk_splitting.py", "split_into_chunks", role="splitter"),
    Family("equivalence", "cases/test_equivalence.py", "allreduce_non_tensor_model_parallel_grads", role="patch"),
    Family("model-provider", "cases/test_model_provider.py", "wrap_model_provider", role="provider"),
    Family("api-fingerprint", "cases/test_api_fingerprint.py", "MEGATRON_SYMBOLS", role="megatron_symbols"),
    Family("import-side-effects", "cases/test_import_side_effects.py", "ADAPTER_PACKAGE"),
)
"""Every family, in the order the README lists them."""

MUTABLE = tuple(family for family in FAMILIES if family.name != "smoke")
"""The families a mutant can be expected to turn red (smoke checks pins, which no mutant changes)."""


class UnknownFamily(LookupError):
    """A family name that is not in the table; the message lists the known ones."""


def family(name: str) -> Family:
    """The family called ``name``."""
    for candidate in FAMILIES:
        if candidate.name == name:
            return candidate
    raise UnknownFamily(f"no contract family {name!r} (known: {', '.join(f.name for f in FAMILIES)})")


def family_of_case(nodeid: str) -> Family | None:
    """The family whose case file holds ``nodeid`` (``cases/test_x.py::name`` or just the file), if any."""
    module = nodeid.split("::", 1)[0]
    return next((candidate for candidate in FAMILIES if candidate.case_file == module), None)
