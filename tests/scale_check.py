"""Run in a target venv (``python -m tests.scale_check <mode>``): the scale estimate's bytes on the meta device next to
the bytes the tiny CPU GPT's real step flattens, as one JSON line.

Modes: ``plain``; ``elements``, the seeded accounting error (elements counted instead of bytes); ``mutant``, Megatron
imported again with a second coalesced reduction added to ``finalize_model_grads`` (the meta side only).
"""

from __future__ import annotations

import dataclasses
import json
import sys

from harness.contracts import scale
from harness.ranks import megatron_state
from harness.ranks.pool import RankPool, close_all_pools
from harness.targets.in_place_mutant import apply_in_place
from harness.targets.megatron_names import FINALIZE_MODULE, TINY_GPT
from tests import rank_tasks

EXTRA = "_allreduce_seeded_extra_grads"
EXTRA_FUNCTION = f'''

def {EXTRA}(model):
    """Seeded: the sequence-parallel grads flattened into a buffer of their own a second time."""
    grads = [p.main_grad for chunk in model for p in chunk.parameters() if getattr(p, "sequence_parallel", False)]
    if grads:
        coalesced = _flatten_dense_tensors(grads)
        torch.distributed.all_reduce(coalesced, group=parallel_state.get_tensor_model_parallel_group())
'''
CALL = "    _allreduce_non_tensor_model_parallel_grads(model, config"


def tiny_request() -> scale.ModelRequest:
    """The tiny CPU GPT (:func:`harness.ranks.cpu_gpt.build_gpt`) as a scale request: TP 2, sequence parallel."""
    fields = {
        "num_layers": TINY_GPT.num_layers,
        "hidden_size": TINY_GPT.hidden_size,
        "num_attention_heads": TINY_GPT.num_attention_heads,
    }
    return scale.ModelRequest("tiny", fields, TINY_GPT.vocab_size, TINY_GPT.seq_length, tp=2, sp=True)


def with_second_reduction() -> None:
    """Megatron imported again with :data:`EXTRA` defined and called beside upstream's non-TP reduction."""
    module = sys.modules.get(FINALIZE_MODULE) or __import__(FINALIZE_MODULE, fromlist=["_"])
    path = module.__file__
    text = open(path).read()
    assert text.count(CALL) == 1, f"{path}: the call to patch is not there once"
    edited = text.replace(CALL, f"    {EXTRA}(model)\n{CALL}") + EXTRA_FUNCTION
    apply_in_place("second_coalesced_reduction", {"core/distributed/finalize_model_grads.py": edited})


def main(mode: str) -> None:
    real = {}
    if mode != "mutant":
        pool = RankPool(2)
        with megatron_state.model_parallel(pool, 2):
            real = pool.run(rank_tasks.real_step_flattened)[0]
        close_all_pools()
    if mode == "elements":
        scale.message_bytes = lambda tensors: sum(tensor.numel() for tensor in tensors)
    if mode == "mutant":
        with_second_reduction()
    meta = scale.measure(tiny_request())
    print(json.dumps({"meta": dataclasses.asdict(meta), "real": real, "problems": scale.cross_check(meta, real)}))


if __name__ == "__main__":
    main(sys.argv[1])
