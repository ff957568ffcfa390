"""modernrl: an RL post-training framework (test fixture of the conformance gate, the "new" adapter form)."""

__version__ = "1.2.0"
