"""The quiet adapter's own submodule."""

VALUE = "quiet"
