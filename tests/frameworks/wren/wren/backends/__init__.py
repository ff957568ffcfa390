"""Training backends for wren. Import a concrete backend explicitly, e.g. ``wren.backends.megatron``."""
