"""Machinery of the megatron-conformance gate, one package per concern.

- ``targets``: what a target is (``matrix.yaml``), its interpreter, its venv's install arguments, what got installed,
  candidates, the provider contract read from an installed Megatron. Imports nothing else from ``harness``.
- ``formats``: the formats several packages share, each with one owner: key validation, Markdown escaping, JUnit
  reading, the red section and repro line. Imports nothing else from ``harness``.
- ``plugin``: the pytest plugin every target session loads (``-p harness.plugin.gate``), the command that runs it,
  the table of contract families, the failure-message helper of the cases, subject loading. May import ``targets``
  and ``formats``.
- ``ranks``: rank processes and the Megatron state inside them. May import ``targets``.
- ``contracts``: what each family needs besides its case file (populations, rank-side comparison, provider calls,
  import isolation and side effects, fingerprints). May import ``targets``, ``plugin`` and ``ranks``.
- ``reference``: the built-in reference subject. Imports only Megatron and torch.
- ``reports``, ``sensitivity``, ``bench``: tools that read what target sessions left behind, or drive them. May
  import every package above.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout the gate runs from: cases, matrix.yaml and the default reports directory live here."""

MAY_IMPORT = {
    "formats": (),
    "targets": ("formats",),
    "plugin": ("formats", "targets"),
    "ranks": ("targets",),
    "reference": (),
    "contracts": ("formats", "targets", "plugin", "ranks"),
    "reports": ("formats", "targets", "plugin", "ranks", "contracts"),
    "sensitivity": ("formats", "targets", "plugin", "ranks", "contracts", "reference", "reports"),
    "bench": ("formats", "targets", "plugin", "ranks", "contracts", "reference", "reports"),
}
"""The packages each package may import besides itself and this one (tests/unit/test_layout.py enforces it)."""
