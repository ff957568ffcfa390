"""Changes a logger's level on import."""

import logging

logging.getLogger("conformance.probe.level").setLevel(logging.DEBUG)
