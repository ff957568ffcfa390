"""legacyrl: an RL post-training framework (test fixture of the conformance gate, the "old" adapter form)."""

__version__ = "0.4.2"
