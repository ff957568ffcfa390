"""Training backends of legacyrl."""
