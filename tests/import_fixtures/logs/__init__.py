"""Logs on import, once through a propagating logger and once through one that may not propagate."""

import logging

logging.getLogger("conformance.probe.logs").warning("adapter loaded")
logging.getLogger("conformance.probe.quiet").error("adapter loaded quietly")
