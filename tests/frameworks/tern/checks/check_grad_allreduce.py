"""Check tern's chunked TP grad all-reduce against upstream on the installed megatron-core.

Run: PYTHONPATH=/work/blind/tern <nox-python> checks/check_grad_allreduce.py
Spawns 2 CPU processes (gloo), TP=2. For each, runs Megatron's own finalize_model_grads once
unpatched and once inside ``chunked_grad_allreduce``, on identical rank-dependent grads, and
requires bitwise-identical results, chunk buffers within budget, and exact restoration.
gloo has no ReduceOp.AVG, so the check's all_reduce shim emulates it (SUM, then / world size)
identically for both runs.
"""

import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

BUCKET_MB = 0.001  # 1048 bytes = 262 fp32 elements


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Chunk(torch.nn.Module):
    """A stand-in for a DDP-wrapped model chunk."""

    def __init__(self, tag, ddp_config, config, rank, frozen_extra=False):
        super().__init__()
        self.ddp_config = ddp_config
        self.config = config
        L = torch.nn.ModuleDict()
        L["input_layernorm"] = torch.nn.LayerNorm(300)             # seq-parallel, SUM, split
        L["q_layernorm"] = torch.nn.LayerNorm(5)                    # qk_layernorm, SUM
        L["k_layernorm"] = torch.nn.LayerNorm(7)                    # qk_layernorm, SUM
        L["router"] = torch.nn.Linear(6, 50, bias=False)            # AVG
        L["router2"] = torch.nn.Linear(3, 3, bias=False)            # AVG, non-contiguous grad
        L["dense"] = torch.nn.Linear(4, 4)                          # not selected
        L["frozen_ln"] = torch.nn.LayerNorm(9)                      # seq-parallel but frozen
        L["bf16_ln"] = torch.nn.LayerNorm(33)                       # seq-parallel, .grad in bf16
        L["empty_ln"] = torch.nn.LayerNorm(0)                       # seq-parallel, 0 elements
        self.layers = L
        for n in ("input_layernorm", "frozen_ln", "bf16_ln", "empty_ln"):
            for p in L[n].parameters():
                p.sequence_parallel = True
        for n in ("router", "router2"):
            L[n].weight.average_gradients_across_tp_domain = True
        for p in L["frozen_ln"].parameters():
            p.requires_grad_(False)
        for p in L["bf16_ln"].parameters():
            p.data = p.data.to(torch.bfloat16)
        g = torch.Generator().manual_seed(1000 * rank + int(tag[1:]))
        for name, p in self.named_parameters():
            if name.startswith("layers.bf16_ln"):
                p.grad = torch.randn(p.shape, generator=g).to(torch.bfloat16)
                continue
            if name == "layers.router2.weight":
                p.grad = torch.randn(p.shape[::-1], generator=g).t()  # non-contiguous
                continue
            p.main_grad = torch.randn(p.shape, generator=g)
        # bf16 `.grad` params get no main_grad -> upstream uses `.grad` (dtype promotion case)

    def finish_grad_sync(self, *a, **kw):
        pass

    def scale_gradients(self, s):
        pass


def _grads(model):
    out = {}
    for i, chunk in enumerate(model):
        for name, p in chunk.named_parameters():
            attr = "main_grad" if hasattr(p, "main_grad") else "grad"
            out[(i, name)] = getattr(p, attr)
    return out


def worker(rank, world, port, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world)
        import importlib
        import warnings

        warnings.simplefilter("ignore")
        from megatron.core import parallel_state
        from megatron.core.distributed import DistributedDataParallelConfig, finalize_model_grads
        from megatron.core.transformer import TransformerConfig

        import tern
        from tern import chunked_grad_allreduce

        fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
        config = TransformerConfig(
            num_layers=1, hidden_size=8, num_attention_heads=2, tensor_model_parallel_size=2,
            sequence_parallel=True, qk_layernorm=True, use_cpu_initialization=True,
        )

        calls = []
        real_all_reduce = dist.all_reduce

        def shim(t, op=dist.ReduceOp.SUM, group=None, async_op=False):
            calls.append((str(op), t.numel(), t.numel() * t.element_size(), t.dtype))
            if op == dist.ReduceOp.AVG:
                r = real_all_reduce(t, op=dist.ReduceOp.SUM, group=group, async_op=async_op)
                t.div_(dist.get_world_size(group))
                return r
            return real_all_reduce(t, op=op, group=group, async_op=async_op)

        dist.all_reduce = shim

        def build():
            return [Chunk(f"c{i}", DistributedDataParallelConfig(), config, rank) for i in range(2)]

        before = dict(fmg.__dict__)
        # 1) upstream
        up = build()
        calls.clear()
        finalize_model_grads(up)
        up_calls = list(calls)
        # 2) tern
        tm = build()
        calls.clear()
        with chunked_grad_allreduce(bucket_mb=BUCKET_MB) as h:
            assert fmg._allreduce_non_tensor_model_parallel_grads is h.replacement
            assert fmg._allreduce_layernorm_grads is h.replacement
            finalize_model_grads(tm)
        tern_calls = list(calls)
        dist.all_reduce = real_all_reduce

        errors = []
        gu, gt = _grads(up), _grads(tm)
        init = _grads(build())
        changed = 0
        for k in gu:
            a, b = gu[k], gt[k]
            if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
                errors.append(f"grad mismatch {k}")
            if not torch.equal(a, init[k]):
                changed += 1
        for k in [(0, "layers.dense.weight"), (1, "layers.frozen_ln.weight")]:
            if not torch.equal(gt[k], init[k]):
                errors.append(f"unselected grad changed {k}")
        if changed < 10:
            errors.append(f"too few grads reduced ({changed})")
        budget = int(BUCKET_MB * 1024 * 1024)
        if not all(c[2] <= budget for c in tern_calls):
            errors.append(f"chunk over budget: {tern_calls}")
        if len(tern_calls) <= len(up_calls):
            errors.append(f"not chunked: upstream {len(up_calls)} calls, tern {len(tern_calls)}")
        up_dtypes = {(c[0], c[3]) for c in up_calls}
        tern_dtypes = {(c[0], c[3]) for c in tern_calls}
        if up_dtypes != tern_dtypes:
            errors.append(f"op/dtype differ: {up_dtypes} vs {tern_dtypes}")
        if sum(c[1] for c in up_calls) != sum(c[1] for c in tern_calls):
            errors.append("total elements differ")

        after = dict(fmg.__dict__)
        if after.keys() != before.keys() or any(after[k] is not before[k] for k in before):
            errors.append("finalize module not restored after normal exit")
        try:
            with chunked_grad_allreduce(0.5):
                with chunked_grad_allreduce(bucket_mb=2):
                    raise KeyError("boom")
        except KeyError:
            pass
        after = dict(fmg.__dict__)
        if after.keys() != before.keys() or any(after[k] is not before[k] for k in before):
            errors.append("finalize module not restored after exception")
        for bad in (0, -1, float("nan"), True, "1"):
            try:
                chunked_grad_allreduce(bad)
                errors.append(f"bad budget accepted: {bad!r}")
            except (TypeError, ValueError):
                pass
        results[rank] = (errors, len(up_calls), len(tern_calls), changed)
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        results[rank] = ([traceback.format_exc()], 0, 0, 0)


def main():
    import megatron.core.package_info as pi

    world = 2
    mgr = mp.Manager()
    results = mgr.dict()
    mp.spawn(worker, args=(world, _free_port(), results), nprocs=world, join=True)
    ok = True
    for r in range(world):
        errors, nu, nt, changed = results.get(r, (["no result"], 0, 0, 0))
        print(f"[mcore {pi.__version__}] rank {r}: upstream calls={nu} tern calls={nt} "
              f"reduced grads={changed} errors={errors}")
        ok &= not errors
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
