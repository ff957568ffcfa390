"""Imports a third-party module that nothing declared."""

import conformance_probe_dependency

VALUE = conformance_probe_dependency.VALUE
