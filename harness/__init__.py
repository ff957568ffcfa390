"""Machinery of the megatron-conformance gate, one package per concern.

- ``targets``: what a target is (``matrix.yaml``), its interpreter, its venv's install arguments, what got installed,
  candidates, the provider contract read from an installed Megatron, Megatron's names the gate relies on. Imports
  only ``formats``.
- ``formats``: the formats several packages share, each with one owner: key validation, Markdown escaping, JUnit
  reading, the red section and repro line, the environment a session reads, ``summary.json``, the "not declared"
  reason. Imports nothing else from ``harness``.
- ``install``: a framework installed beside a target's Megatron without breaking it: the resolution with the target's
  torch and megatron-core held, torch-coupled packages resolved to releases that accept the target's torch, the probe
  that the venv still imports Megatron as the target does, the findings of what was left out, moved or forced back.
  May import ``formats`` and ``targets``.
- ``subjects``: the subject named once per session and loaded where needed (module, ``.py`` path or declaration),
  reading and checking declarations, the subject built from one, what a subject says about itself. May import
  ``formats``, ``targets`` and ``install``.
- ``plugin``: the pytest plugin every target session loads (``-p harness.plugin.gate``), the command that runs it,
  the table of contract families, the failure-message helper of the cases. May import ``formats``, ``targets``,
  ``install``, ``subjects`` and ``ranks`` (the warnings plugin registers a rank start hook).
- ``ranks``: rank processes and the Megatron state inside them. May import ``targets``.
- ``contracts``: what each family needs besides its case file (populations, rank-side comparison, generated
  providers, import isolation and side effects, fingerprints). May import ``formats``, ``targets``, ``subjects``,
  ``plugin``, ``ranks`` and ``source``.
- ``source``: reading a framework's and Megatron's source without running them: its modules in every layout, its
  patches, Megatron's calls of what it replaces, the verdicts read from both, ``scan``'s starter. May import
  ``formats``, ``targets`` and ``subjects``.
- ``reference``: the built-in reference subject. Imports only Megatron and torch.
- ``bisect``: the search for the first build of megatron-core on the index that turns a subject's cases red, its
  steps, their cache and the source diff of its answer. May import ``formats``, ``targets``, ``subjects``, ``source``,
  ``plugin`` and ``reports``.
- ``launch``: the ``megatron-conformance`` command of the installed gate, which runs the noxfile from a framework's
  checkout. Imports only ``formats``.
- ``reports``, ``sensitivity``, ``bench``: tools that read what target sessions left behind, or drive them. May
  import every package above.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The checkout the gate runs from: cases, matrix.yaml and the default reports directory live here."""

MAY_IMPORT = {
    "formats": (),
    "targets": ("formats",),
    "install": ("formats", "targets"),
    "subjects": ("formats", "targets", "install"),
    "plugin": ("formats", "targets", "install", "subjects", "ranks"),
    "ranks": ("targets",),
    "reference": (),
    "source": ("formats", "targets", "subjects"),
    "contracts": ("formats", "targets", "subjects", "plugin", "ranks", "source"),
    "reports": ("formats", "targets", "subjects", "plugin", "ranks", "contracts", "source"),
    "sensitivity": ("formats", "targets", "subjects", "plugin", "ranks", "contracts", "source", "reference", "reports"),
    "bench": ("formats", "targets", "subjects", "plugin", "ranks", "contracts", "source", "reference", "reports"),
    "launch": ("formats",),
    "bisect": ("formats", "targets", "subjects", "plugin", "reports", "source"),
}
"""The packages each package may import besides itself and this one (tests/unit/test_layout.py enforces it)."""
