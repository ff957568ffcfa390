"""Seeded frameworks judged from source against megatron-core 0.15.3: a package written into a temporary folder whose
patch module imports ``transformer_engine`` first, so that importing it raises on this machine and nothing but its
source can be read. Shared by the tests of each rule (``tests/e2e/test_source_verdicts.py``) and of each way a
framework patches (``tests/e2e/test_source_patch_forms.py``)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from harness.source.call_sites import MegatronSource
from harness.source.from_source import versions_of
from harness.source.source_verdicts import SymbolVerdict, framework_verdicts
from harness.targets.release_source import release_source
from tests.pytest_helpers import ROOT

RELEASE = "0.15.3"
MLA = "megatron.core.transformer.multi_latent_attention"
FORWARD = f"{MLA}:MultiLatentAttention.forward"
POST_PROCESS = "megatron.core.models.gpt.fine_grained_callables:PostProcessNode.forward_impl"
NODE_KEEPS = "megatron/core/models/gpt/fine_grained_callables.py:148"
"""Where ``PostProcessNode.__init__`` hands ``weak_method(self.forward_impl)`` to its base, before any swap."""

BACKFILL_SEED = """
import sys

def stand_in({parameters}):
    return x

def provide():
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if namespace is not None and namespace.get("{name}", "keep") is None:
            namespace["{name}"] = stand_in
"""
"""A stand-in for an optional dependency's ``name`` back-filled into every loaded module holding ``None`` under it
(verl's form); the filling statement is the patch module's line 15."""

HEAD = """\
import transformer_engine  # only on CUDA machines: importing this module raises here
import megatron.core
from packaging import version
from megatron.core.transformer.multi_latent_attention import MLASelfAttention, MultiLatentAttention
"""
"""The patch module's first lines: a seed's line numbers count from line 5."""


def seeded_framework(root: Path, name: str, text: str) -> Path:
    """The framework ``name`` under ``root``: package ``seeded`` whose ``patch.py`` is :data:`HEAD` and ``text``."""
    package = root / name / "seeded"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "patch.py").write_text(HEAD + textwrap.dedent(text))
    return root / name


def seeded_release() -> MegatronSource:
    """megatron-core 0.15.3's source: the target venv's, else its wheel from the cache."""
    return MegatronSource(release_source(RELEASE, venvs=ROOT / ".nox").root)


def verdicts(root: Path, megatron: MegatronSource) -> dict[str, SymbolVerdict]:
    versions = versions_of(megatron, RELEASE, "2.13.0")
    return {v.symbol: v for v in framework_verdicts(root, megatron, versions)}
