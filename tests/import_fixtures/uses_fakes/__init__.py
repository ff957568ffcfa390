"""Imports optional dependencies that exist only as declared fakes, and probes one undeclared name."""

import deep_ep
import torch_memory_saver
from deep_ep import Buffer
from megatron.core.distributed import finalize_model_grads

BUFFER = Buffer(num_sms=24)
ALLREDUCE = finalize_model_grads._allreduce_layernorm_grads
HAS_LOW_LATENCY = getattr(deep_ep, "low_latency_mode", None) is not None
SAVER = torch_memory_saver
