"""Seeded adapter: appends its own name to a Megatron module-level list (``__all__``) in place at import."""

import megatron.core.tensor_parallel

megatron.core.tensor_parallel.__all__.append("chunked_allreduce")
