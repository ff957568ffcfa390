"""Seeded adapter: turns Megatron's logger down at import."""

import logging

logging.getLogger("megatron.core").setLevel(logging.ERROR)
