"""finch self-check for one megatron-core version (CPU, gloo, 2 processes).

Run:  PYTHONPATH=/work/blind/finch:/work/blind/finch/checks/stubs <venv>/bin/python checks/check_finch.py
(the stubs dir holds a tiny stand-in for `attrs`, which those venvs lack).
"""
import argparse
import importlib
import inspect
import logging
import os
import socket
import sys
import types

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FMG = "megatron.core.distributed.finalize_model_grads"


def check_import_has_no_side_effects():
    fmg = importlib.import_module(FMG)
    ps = importlib.import_module("megatron.core.parallel_state")
    before_fmg = dict(vars(fmg))
    before_ps_init = ps.initialize_model_parallel
    root = logging.getLogger()
    before_log = (list(root.handlers), root.level, set(logging.root.manager.loggerDict))
    env_reads = []

    class Spy(dict):
        def __getitem__(self, k):
            env_reads.append(k)
            return super().__getitem__(k)

        def get(self, k, d=None):
            env_reads.append(k)
            return super().get(k, d)

        def __contains__(self, k):
            env_reads.append(k)
            return super().__contains__(k)

    real_env = os.environ
    os.environ = Spy(real_env)
    try:
        for m in [m for m in sys.modules if m == "finch" or m.startswith("finch.")]:
            del sys.modules[m]
        import finch.mcore  # noqa: F401
    finally:
        os.environ = real_env
    assert not env_reads, env_reads
    after_log = (list(root.handlers), root.level, set(logging.root.manager.loggerDict))
    assert before_log == after_log, "import configured logging"
    assert dict(vars(fmg)) == before_fmg and all(
        vars(fmg)[k] is v for k, v in before_fmg.items()
    ), "import patched finalize_model_grads"
    assert ps.initialize_model_parallel is before_ps_init
    print("ok import: no patching, no env reads, no logging config")


def check_splitter():
    from finch.mcore import Segment, split_into_chunks

    ts = [torch.zeros(3), torch.zeros(0), torch.zeros(10), torch.zeros(2, dtype=torch.bfloat16)]
    for budget in (4, 8, 12, 20, 40, 64, 1 << 20):
        chunks = split_into_chunks(ts, budget)
        seen = {}
        for ch in chunks:
            assert ch and sum(s.stop - s.start for s in ch) * 4 <= budget, (budget, ch)
            for s in ch:
                assert isinstance(s, Segment)
                assert seen.get(s.index, 0) == s.start, (budget, chunks)
                seen[s.index] = s.stop
        assert seen == {i: t.numel() for i, t in enumerate(ts)}, (budget, chunks)
        order = [s.index for ch in chunks for s in ch]
        assert order == sorted(order)
    assert len(split_into_chunks(ts, 1 << 20)) == 1
    assert split_into_chunks(ts, 12) == [
        [Segment(0, 0, 3), Segment(1, 0, 0)], [Segment(2, 0, 3)], [Segment(2, 3, 6)],
        [Segment(2, 6, 9)], [Segment(2, 9, 10), Segment(3, 0, 2)]]
    assert split_into_chunks(ts[3:], 2) == [[Segment(0, 0, 1)], [Segment(0, 1, 2)]]
    nc = torch.zeros(4, 3).t()  # non-contiguous: never cut
    assert split_into_chunks([torch.zeros(2), nc], 16) == [[Segment(0, 0, 2)], [Segment(1, 0, 12)]]
    assert split_into_chunks([], 16) == []
    for bad in (0, -1, 3, True):
        try:
            split_into_chunks(ts, bad)
        except ValueError:
            pass
        else:
            raise AssertionError(bad)
    print("ok splitter")


def check_budget_resolution():
    from finch.mcore import DEFAULT_GRAD_CHUNK_BYTES, resolve_grad_chunk_bytes

    os.environ.pop("FINCH_GRAD_CHUNK_BYTES", None)
    ns = argparse.Namespace
    assert resolve_grad_chunk_bytes(ns()) == DEFAULT_GRAD_CHUNK_BYTES
    assert resolve_grad_chunk_bytes(ns(grad_chunk_bytes=None)) == DEFAULT_GRAD_CHUNK_BYTES
    os.environ["FINCH_GRAD_CHUNK_BYTES"] = "4096"
    assert resolve_grad_chunk_bytes(ns()) == 4096
    assert resolve_grad_chunk_bytes(ns(grad_chunk_bytes=None)) == 4096
    assert resolve_grad_chunk_bytes(ns(grad_chunk_bytes=64)) == 64
    os.environ["FINCH_GRAD_CHUNK_BYTES"] = "nope"
    try:
        resolve_grad_chunk_bytes(ns())
        raise AssertionError
    except ValueError:
        pass
    os.environ.pop("FINCH_GRAD_CHUNK_BYTES")
    print("ok budget resolution")


def check_patch_apply_undo():
    import finch.mcore as fm

    fmg = importlib.import_module(FMG)
    ps = importlib.import_module("megatron.core.parallel_state")
    snap = dict(vars(fmg))
    ps_init = ps.initialize_model_parallel
    args = argparse.Namespace(megatron_patches=["chunked_grad_allreduce", "log_model_parallel_init"],
                              grad_chunk_bytes=32)
    h = fm.apply_patches(args)
    new = fmg._allreduce_non_tensor_model_parallel_grads
    assert new.__name__ == "chunked_allreduce_non_tensor_model_parallel_grads"
    assert new.finch_budget_bytes == 32
    assert fmg._allreduce_layernorm_grads is new
    assert fmg.finalize_model_grads.__globals__["_allreduce_non_tensor_model_parallel_grads"] is new
    assert ps.initialize_model_parallel is not ps_init
    try:
        fm.apply_patches(args, names=["chunked_grad_allreduce"])
        raise AssertionError("double apply allowed")
    except RuntimeError:
        pass
    assert fmg._allreduce_non_tensor_model_parallel_grads is new
    h.undo()
    h.undo()
    assert set(vars(fmg)) == set(snap) and all(vars(fmg)[k] is v for k, v in snap.items())
    assert ps.initialize_model_parallel is ps_init
    assert fm.apply_patches(argparse.Namespace()).names == []
    try:
        fm.apply_patches(args, names=["chunked_grad_allreduce", "nope"])
        raise AssertionError
    except KeyError:
        pass
    assert all(vars(fmg)[k] is v for k, v in snap.items())
    print("ok apply/undo")


def check_provider():
    from finch.mcore import wrap

    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_layernorm = torch.nn.LayerNorm(2)
            self.linear_qkv = torch.nn.Linear(2, 2)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(4, 2)
            self.self_attention = Attn()
            self.output_layer = torch.nn.Linear(2, 4)

    calls = []

    def provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None):
        calls.append(dict(pre_process=pre_process, post_process=post_process, vp_stage=vp_stage,
                          config=config, pg_collection=pg_collection))
        return M()

    args = argparse.Namespace(freeze_patterns=[r"^embedding\."], trainable_patterns=None)
    p = wrap(provider, args)
    assert inspect.signature(p) == inspect.signature(provider) and p.__name__ == "provider"
    m = p(pre_process=False, post_process=True, vp_stage=1, config="c", pg_collection="g")
    assert calls[-1] == dict(pre_process=False, post_process=True, vp_stage=1, config="c",
                             pg_collection="g")
    frozen = {n for n, q in m.named_parameters() if not q.requires_grad}
    assert frozen == {"embedding.weight"}, frozen
    p2 = wrap(provider, argparse.Namespace(freeze_patterns=["bias"], trainable_patterns=["layernorm", "output"]))
    m = p2(True, False)  # positional too
    assert calls[-1]["pre_process"] is True and calls[-1]["post_process"] is False
    trainable = {n for n, q in m.named_parameters() if q.requires_grad}
    assert trainable == {"self_attention.q_layernorm.weight", "output_layer.weight"}, trainable
    # builder-style (pg_collection positional) + list result
    def builder(pg_collection, pre_process=None, post_process=None, vp_stage=None):
        return [M(), M()]
    ms = wrap(builder, argparse.Namespace(trainable_patterns="output"))("pg", pre_process=True)
    assert all({n for n, q in x.named_parameters() if q.requires_grad} == {"output_layer.weight", "output_layer.bias"} for x in ms)
    m = wrap(provider, argparse.Namespace())()
    assert all(q.requires_grad for q in m.parameters())
    print("ok provider")


# ----------------------------------------------------------------- distributed part
class Chunk(torch.nn.Module):
    def __init__(self, ddp_config, config, with_none):
        super().__init__()
        self.ddp_config = ddp_config
        self.config = config
        self.final_layernorm = torch.nn.LayerNorm(7)
        self.self_attention = torch.nn.Module()
        self.self_attention.q_layernorm = torch.nn.LayerNorm(5)
        self.self_attention.k_layernorm = torch.nn.LayerNorm(3)
        self.proj = torch.nn.Linear(4, 4)
        self.router = torch.nn.Linear(3, 2)
        self.frozen_ln = torch.nn.LayerNorm(2)
        for p in self.final_layernorm.parameters():
            p.sequence_parallel = True
        for p in self.frozen_ln.parameters():
            p.sequence_parallel = True
            p.requires_grad_(False)
        for p in self.router.parameters():
            p.average_gradients_across_tp_domain = True
        self.proj.weight.sequence_parallel = False
        self.with_none = with_none

    def finish_grad_sync(self, force_all_reduce=False):
        pass

    def set_grads(self, seed):
        g = torch.Generator().manual_seed(seed)
        for i, (n, p) in enumerate(self.named_parameters()):
            val = torch.randn(p.shape, generator=g) * 100
            if "q_layernorm" in n or n.startswith("router"):
                p.main_grad = val.to(torch.bfloat16 if "weight" in n else torch.float32)
            elif "k_layernorm.bias" in n and self.with_none:
                p.main_grad = None
            elif "final_layernorm.bias" in n:
                p.grad = val
            else:
                p.main_grad = val

    def grads(self):
        out = {}
        for n, p in self.named_parameters():
            g = getattr(p, "main_grad", p.grad) if hasattr(p, "main_grad") else p.grad
            out[n] = None if g is None else g.clone()
        return out


def _worker(rank, port, result_q):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=2)
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.transformer.transformer_config import TransformerConfig
        import finch.mcore as fm

        ps.initialize_model_parallel(tensor_model_parallel_size=2)
        fmg = importlib.import_module(FMG)
        original = fmg._allreduce_non_tensor_model_parallel_grads
        modern = "tp_group" in inspect.signature(original).parameters

        real_all_reduce = dist.all_reduce
        log = []

        def all_reduce(t, op=dist.ReduceOp.SUM, group=None, async_op=False):
            log.append((t.numel() * t.element_size(), t.dtype))
            if op == dist.ReduceOp.AVG:  # gloo has no AVG: emulate identically for both paths
                r = real_all_reduce(t, op=dist.ReduceOp.SUM, group=group, async_op=async_op)
                t.div_(dist.get_world_size(group))
                return r
            return real_all_reduce(t, op=op, group=group, async_op=async_op)

        dist.all_reduce = all_reduce
        config = TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2,
                                   tensor_model_parallel_size=2, sequence_parallel=True,
                                   qk_layernorm=True)
        ddp_config = DistributedDataParallelConfig()
        model = [Chunk(ddp_config, config, modern), Chunk(ddp_config, config, modern)]
        tp = ps.get_tensor_model_parallel_group()

        def run(fn):
            for i, c in enumerate(model):
                c.set_grads(1000 * rank + i)
            log.clear()
            if modern:
                fn(model, config, tp)
            else:
                fn(model, config)
            return [c.grads() for c in model], list(log)

        ref, ref_log = run(original)
        assert len(ref_log) == 2, ref_log
        # the grads did change (sum/avg across ranks) for the selected params only
        for i, c in enumerate(model):
            c.set_grads(1000 * rank + i)
            init = c.grads()
            assert torch.equal(init["proj.weight"], ref[i]["proj.weight"])
            assert not torch.equal(init["final_layernorm.weight"], ref[i]["final_layernorm.weight"])
        for budget in (4, 8, 24, 100, 1 << 20):
            h = fm.apply_patches(argparse.Namespace(grad_chunk_bytes=budget),
                                 names=["chunked_grad_allreduce"])
            got, got_log = run(fmg._allreduce_non_tensor_model_parallel_grads)
            h.undo()
            assert fmg._allreduce_non_tensor_model_parallel_grads is original
            for a, b in zip(ref, got):
                for k in a:
                    if a[k] is None:
                        assert b[k] is None, k
                    else:
                        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), (budget, k)
            assert all(nb <= budget for nb, _ in got_log), (budget, got_log)
            assert {d for _, d in got_log} == {d for _, d in ref_log}, (got_log, ref_log)
            if budget == 1 << 20:
                assert len(got_log) == 2
            else:
                assert len(got_log) > 2
        # Megatron's own finalize_model_grads reaches the replacement
        reached = []
        h = fm.apply_patches(argparse.Namespace(grad_chunk_bytes=16),
                             names=["chunked_grad_allreduce"])
        inner = fmg._allreduce_non_tensor_model_parallel_grads

        def spy(*a, **k):
            reached.append(1)
            return inner(*a, **k)

        fmg._allreduce_non_tensor_model_parallel_grads = spy
        try:
            for i, c in enumerate(model):
                c.set_grads(1000 * rank + i)
            fmg.finalize_model_grads(model)
            fin = [c.grads() for c in model]
        finally:
            fmg._allreduce_non_tensor_model_parallel_grads = inner
        h.undo()
        assert reached == [1]
        for a, b in zip(ref, fin):
            for k in a:
                assert (a[k] is None and b[k] is None) or torch.equal(a[k], b[k]), k
        result_q.put((rank, "ok", f"modern={modern}"))
    except BaseException as e:  # noqa
        import traceback
        result_q.put((rank, "fail", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def check_distributed():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    res = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    for rank, status, msg in sorted(res):
        if status != "ok":
            print(f"rank {rank} FAILED:\n{msg}")
            raise SystemExit(1)
    print("ok distributed (chunked == upstream, budget respected, finalize_model_grads reaches it):",
          res[0][2])


if __name__ == "__main__":
    import megatron.core

    print("megatron-core", getattr(megatron.core, "__version__", "?"), "torch", torch.__version__)
    check_import_has_no_side_effects()
    check_splitter()
    check_budget_resolution()
    check_patch_apply_undo()
    check_provider()
    check_distributed()
    print("ALL OK")
