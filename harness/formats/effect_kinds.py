"""The kinds of import side effect, one vocabulary for the detector that reports them and for the subject
declarations and ``summary.json`` waivers that name them."""

KINDS = (
    "module-attribute",
    "sys-modules",
    "sys-path",
    "log-record",
    "logger-config",
    "warning",
    "env-read",
    "env-write",
    "thread",
    "process",
    "cuda-init",
    "file",
    "function-state",
    "class-attribute",
    "mutable-global",
    "process-hook",
)

MESSAGE_ALLOWANCES = {"log-message": "log-record"}
"""Allowance keys that are no kind of their own: each waives effects of the kind it maps to by their message rather
than their name (a record logged through a logger a framework shares with others, such as the root logger)."""

ALLOWANCE_KINDS = (*KINDS, *MESSAGE_ALLOWANCES)
"""Every key an allowance (``IMPORT_SIDE_EFFECTS_ALLOWED``, a declaration's ``[allow]``) may use."""
