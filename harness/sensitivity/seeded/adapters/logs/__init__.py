"""Seeded adapter: announces itself in the log at import."""

import logging

logging.getLogger("adapter.seeded").warning("chunked all-reduce adapter loaded")
