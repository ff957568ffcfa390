"""Correct variant: the adapter package reads the subject's own budget variable (``BUDGET_ENV_VAR``) into a module
global when it is imported, as frameworks do. Reading the variable a subject names as its budget is listed, not
reported."""

from pathlib import Path

from harness.reference import *  # noqa: F403

ADAPTER_PACKAGE = str(Path(__file__).resolve().parent / "adapters" / "reads_budget_at_import")
STRICT = False
