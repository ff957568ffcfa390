"""2-rank gloo check: chunked replacement == upstream, bit for bit, on the running Megatron.

Run as a script with the interpreter of one megatron-core version.
"""

import os
import socket
import sys
import traceback
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 2


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Chunk(torch.nn.Module):
    """Stand-in for a DDP model chunk: ddp_config + named_parameters + config."""

    def __init__(self, ddp_config, config):
        super().__init__()
        self.ddp_config = ddp_config
        self.config = config

    def finish_grad_sync(self, *a, **kw):
        pass


def _param(shape, dtype, rank, seed, *, main_grad=False, noncontig=False, **attrs):
    g = torch.Generator().manual_seed(seed * 10 + rank)
    p = torch.nn.Parameter(torch.zeros(shape, dtype=dtype))
    grad_dtype = torch.float32 if main_grad else dtype
    val = (torch.randn(shape, generator=g) * 3).to(grad_dtype)
    if noncontig:
        val = val.t().contiguous().t()  # same values, transposed strides
        assert not val.is_contiguous()
    if main_grad:
        p.main_grad = val
    else:
        p.grad = val
    for k, v in attrs.items():
        setattr(p, k, v)
    return p


def build(rank, with_none_grad):
    from megatron.core.distributed import DistributedDataParallelConfig

    ddp = DistributedDataParallelConfig()
    c0 = Chunk(ddp, None)
    c0.ln1 = _param((5,), torch.float32, rank, 1, sequence_parallel=True)
    c0.ln2 = _param((7,), torch.bfloat16, rank, 2, sequence_parallel=True)
    c0.ln3 = _param((3, 4), torch.bfloat16, rank, 3, main_grad=True, sequence_parallel=True)
    c0.ln4 = _param((4, 6), torch.float32, rank, 4, noncontig=True, sequence_parallel=True)
    c0.big = _param((40,), torch.float16, rank, 5, sequence_parallel=True)
    c0.self_attention = torch.nn.Module()
    c0.self_attention.q_layernorm = torch.nn.Module()
    c0.self_attention.q_layernorm.weight = _param((6,), torch.bfloat16, rank, 6)
    c0.self_attention.k_layernorm = torch.nn.Module()
    c0.self_attention.k_layernorm.weight = _param((6,), torch.float32, rank, 7)
    c0.avg1 = _param((9,), torch.float32, rank, 8, average_gradients_across_tp_domain=True)
    c0.avg2 = _param((33,), torch.float32, rank, 9, average_gradients_across_tp_domain=True)
    c0.frozen = _param((4,), torch.float32, rank, 10, sequence_parallel=True)
    c0.frozen.requires_grad_(False)
    c0.tp_weight = _param((8,), torch.float32, rank, 11)  # not selected
    c0.empty = _param((0,), torch.float32, rank, 12, sequence_parallel=True)
    if with_none_grad:
        c0.nograd = torch.nn.Parameter(torch.zeros(3))
        c0.nograd.sequence_parallel = True
    c1 = Chunk(ddp, None)
    c1.shared = c0.ln1  # same param in two chunks (listed twice upstream)
    c1.ln5 = _param((2, 3), torch.float16, rank, 13, sequence_parallel=True)
    c1.avg3 = _param((5,), torch.bfloat16, rank, 14, average_gradients_across_tp_domain=True)
    return [c0, c1]


def grads_of(model):
    out = {}
    for i, ch in enumerate(model):
        for n, p in ch.named_parameters():
            for attr in ("grad", "main_grad"):
                t = getattr(p, attr, None)
                if t is not None:
                    out[f"{i}.{n}.{attr}"] = (t.clone(), id(t))
    return out


def worker(rank, port, q):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=WORLD)
        from megatron.core import parallel_state as ps
        import importlib

        fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
        from petrel.mcore import install, is_installed, uninstall

        ps.initialize_model_parallel(tensor_model_parallel_size=WORLD)
        legacy = "tp_group" not in fmg._allreduce_non_tensor_model_parallel_grads.__code__.co_varnames

        # gloo has no AVG: shim it (SUM then divide in place) for upstream and ours alike;
        # also record every collective's size.
        real_all_reduce = dist.all_reduce
        log = []

        def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
            log.append((tensor.numel() * tensor.element_size(), tensor.dtype))
            if op == dist.ReduceOp.AVG:
                r = real_all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
                tensor.div_(dist.get_world_size(group))
                return r
            return real_all_reduce(tensor, op=op, group=group, async_op=async_op)

        dist.all_reduce = all_reduce
        config = SimpleNamespace(sequence_parallel=True, qk_layernorm=True)
        tp = ps.get_tensor_model_parallel_group()
        call_args = (config,) if legacy else (config, tp)

        ref_model = build(rank, with_none_grad=not legacy)
        upstream = fmg._allreduce_non_tensor_model_parallel_grads
        upstream(ref_model, *call_args)
        ref = grads_of(ref_model)
        n_upstream = len(log)
        assert n_upstream > 0, "upstream reduced nothing: test is vacuous"

        before = dict(fmg.__dict__)
        results = []
        for budget in (1, 3, 8, 24, 64, 100, 1 << 30):
            model = build(rank, with_none_grad=not legacy)
            ids_before = {k: v[1] for k, v in grads_of(model).items()}
            log.clear()
            install(budget)
            try:
                fmg._allreduce_non_tensor_model_parallel_grads(model, *call_args)
            finally:
                uninstall()
            got = grads_of(model)
            assert got.keys() == ref.keys(), (got.keys() ^ ref.keys())
            for k in ref:
                a, b = ref[k][0], got[k][0]
                assert a.dtype == b.dtype and a.shape == b.shape, k
                assert torch.equal(a, b), (budget, k, a, b)
                assert got[k][1] == ids_before[k], f"grad object replaced: {k}"
            itemmax = 4
            for nbytes, _ in log:
                assert nbytes <= max(budget, itemmax), (budget, nbytes)
            results.append((budget, len(log)))
            # the test data must actually differ between ranks (reduction is not a no-op)
        assert not is_installed()
        assert all(fmg.__dict__[k] is v for k, v in before.items())

        # finalize_model_grads reaches the replacement (name resolved in its globals).
        seen = []
        from petrel.mcore import grad_allreduce as ga

        orig_reduce_group = ga._reduce_group

        def spy(*a, **kw):
            seen.append(a[3])
            return orig_reduce_group(*a, **kw)

        ga._reduce_group = spy
        e2e = "skipped"
        try:
            install(16)
            try:
                from megatron.core.transformer.transformer_config import TransformerConfig

                tcfg = TransformerConfig(
                    num_layers=1, hidden_size=8, num_attention_heads=2,
                    tensor_model_parallel_size=WORLD, sequence_parallel=True, qk_layernorm=True,
                )
                model = build(rank, with_none_grad=not legacy)
                for ch in model:
                    ch.config = tcfg
                fmg.finalize_model_grads(model)
                e2e = f"ok ({len(seen)} op groups)"
                assert len(seen) == 2
            finally:
                uninstall()
        finally:
            ga._reduce_group = orig_reduce_group
        q.put((rank, "ok", dict(upstream_collectives=n_upstream, ours=results, legacy=legacy, e2e=e2e)))
    except Exception:
        q.put((rank, "fail", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=worker, args=(r, port, q)) for r in range(WORLD)]
    for p in procs:
        p.start()
    res = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    ok = True
    for rank, status, info in sorted(res, key=lambda r: r[0]):
        print(f"rank {rank}: {status}: {info}")
        ok &= status == "ok"
    print("check_allreduce:", "OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)
