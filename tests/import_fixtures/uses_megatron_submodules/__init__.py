"""Imports Megatron submodules the ordinary way, beside fakes that declare only ``megatron``."""

import megatron.core.distributed.finalize_model_grads as fmg
from megatron.core import parallel_state
from megatron.core.transformer.module import MegatronModule

PARALLEL_STATE = parallel_state
FINALIZE = fmg
MODULE = MegatronModule
