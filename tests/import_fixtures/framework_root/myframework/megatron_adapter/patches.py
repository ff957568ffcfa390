"""The adapter's own submodule, imported relatively."""

PATCHED = ("finalize_model_grads",)
