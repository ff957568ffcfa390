"""Training backends of modernrl."""
