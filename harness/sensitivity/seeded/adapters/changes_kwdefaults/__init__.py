"""Seeded adapter: makes Megatron's log_single_rank log on rank 1 by default, changing its keyword-only default at
import."""

from megatron.core.utils import log_single_rank

log_single_rank.__kwdefaults__ = {"rank": 1}
