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
