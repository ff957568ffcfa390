"""Single-process checks: import purity, the MiB splitter, the provider wrapper.

Run: PYTHONPATH=/work/blind/tern <nox-python> checks/check_unit.py
"""

import collections.abc
import importlib
import inspect
import logging
import os
import sys
import types
import warnings

warnings.simplefilter("ignore")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


# ---------------------------------------------------------------- import purity
fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")
import torch  # noqa: E402


class EnvSpy(collections.abc.MutableMapping):
    def __init__(self, env):
        self.env, self.touched = env, []

    def __getitem__(self, k):
        self.touched.append(k)
        return self.env[k]

    def __setitem__(self, k, v):
        self.touched.append(k)
        self.env[k] = v

    def __delitem__(self, k):
        self.touched.append(k)
        del self.env[k]

    def __iter__(self):
        self.touched.append("<iter>")
        return iter(self.env)

    def __len__(self):
        return len(self.env)


fmg_before = dict(fmg.__dict__)
root = logging.getLogger()
log_before = (list(root.handlers), root.level, set(logging.Logger.manager.loggerDict))
spy, real_env = EnvSpy(os.environ), os.environ
os.environ = spy
try:
    import tern  # noqa: E402
    import tern.config  # noqa: E402,F401
    import tern.mcore  # noqa: E402,F401
    import tern.mcore.chunking  # noqa: E402,F401
    import tern.mcore.grad_allreduce  # noqa: E402,F401
    import tern.mcore.provider  # noqa: E402,F401
finally:
    os.environ = real_env
check(not spy.touched, f"import read the environment: {spy.touched}")
check(
    (list(root.handlers), root.level, set(logging.Logger.manager.loggerDict)) == log_before,
    "import changed logging",
)
fmg_after = dict(fmg.__dict__)
check(
    fmg_after.keys() == fmg_before.keys() and all(fmg_after[k] is fmg_before[k] for k in fmg_before),
    "import patched finalize_model_grads",
)

# ---------------------------------------------------------------- splitter
from tern import Segment, mib_to_bytes, split_into_chunks  # noqa: E402

check(mib_to_bytes(0.5) == 524288 and mib_to_bytes(2) == 2097152, "mib_to_bytes")
for bad in (0, -0.1, float("inf"), float("nan"), True, None, "1"):
    try:
        mib_to_bytes(bad)
        failures.append(f"bad budget accepted {bad!r}")
    except (TypeError, ValueError):
        pass


def verify(tensors, bucket_mb, dtype=None):
    plan = split_into_chunks(tensors, bucket_mb, dtype)
    dt = dtype or tensors[0].dtype
    for t in tensors[1:]:
        dt = dtype or torch.promote_types(dt, t.dtype)
    item = torch.empty((), dtype=dt).element_size()
    budget = int(bucket_mb * 1024 * 1024)
    stream = [s for c in plan for s in c]
    for c in plan:
        check(c and sum(s.numel for s in c) * item <= budget, f"chunk over budget {bucket_mb}")
        check(all(isinstance(s, Segment) and s.numel > 0 for s in c), "empty segment")
    expect = [(i, 0) for i, t in enumerate(tensors) if t.numel()]
    pos = {}
    for s in stream:
        check(pos.get(s.index, 0) == s.start, "segments not contiguous/in order")
        pos[s.index] = s.stop
    check(all(pos.get(i, 0) == t.numel() for i, t in enumerate(tensors)), "not full coverage")
    check([s.index for s in stream] == sorted(s.index for s in stream), "tensor order")
    check({i for i, _ in expect} == set(pos), "coverage set")
    # all chunks but the last are full
    cap = budget // item
    check(all(sum(s.numel for s in c) == cap for c in plan[:-1]), "non-tight packing")
    return plan


f32 = lambda *n: torch.zeros(*n)  # noqa: E731
verify([f32(10), f32(3, 4), f32(0), f32(1000)], 0.001)
verify([f32(10)], 64)
check(len(split_into_chunks([f32(10)], 64)) == 1, "small input must be one chunk")
check(split_into_chunks([], 1.0) == [] and split_into_chunks([f32(0)], 1.0) == [], "empty")
p = verify([f32(300), torch.zeros(300, dtype=torch.bfloat16)], 0.5 / 1024)  # 512 bytes
check(len(p) == 5, f"promoted fp32 sizing: {len(p)} chunks")  # 600 elts / 128 per chunk
check(len(split_into_chunks([torch.zeros(300, dtype=torch.bfloat16)], 0.5 / 1024)) == 2, "bf16")
verify([f32(7), f32(9)], 8 / 2**20, torch.float64)  # one element per chunk
try:
    split_into_chunks([f32(3)], 2 / 2**20)
    failures.append("budget below one element accepted")
except ValueError:
    pass
check(list(inspect.signature(tern.chunked_grad_allreduce).parameters) == ["bucket_mb"], "cm sig")

# ---------------------------------------------------------------- provider wrapper
from tern import wrap  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(4, 4)
        self.decoder = torch.nn.ModuleDict(
            {
                "input_layernorm": torch.nn.LayerNorm(4),
                "linear_qkv": torch.nn.Linear(4, 4),
                "linear_fc1": torch.nn.Linear(4, 4),
            }
        )
        self.output_layer = torch.nn.Linear(4, 4, bias=False)


seen = []


def provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None):
    """doc"""
    seen.append(dict(pre_process=pre_process, post_process=post_process, vp_stage=vp_stage,
                     config=config, pg_collection=pg_collection))
    return Block()


def legacy_provider(pre_process=True, post_process=True, add_encoder=True, add_decoder=True):
    seen.append(dict(pre_process=pre_process, post_process=post_process,
                     add_encoder=add_encoder, add_decoder=add_decoder))
    return [Block(), Block()]


def trainable(m):
    return sorted(n for n, q in m.named_parameters() if q.requires_grad)


args = types.SimpleNamespace(freeze_patterns=[r"^embedding\.", r"linear_fc1\.bias$"],
                             trainable_patterns=None)
w = wrap(provider, args)
check(inspect.signature(w) == inspect.signature(provider) and w.__name__ == "provider", "wraps")
cfg, pgc = object(), object()
m = w(pre_process=False, post_process=True, vp_stage=3, config=cfg, pg_collection=pgc)
check(seen[-1] == dict(pre_process=False, post_process=True, vp_stage=3, config=cfg,
                       pg_collection=pgc), "kwargs not passed through")
check(isinstance(m, Block), "model not returned")
check(trainable(m) == ['decoder.input_layernorm.bias', 'decoder.input_layernorm.weight',
                       'decoder.linear_fc1.weight', 'decoder.linear_qkv.bias',
                       'decoder.linear_qkv.weight', 'output_layer.weight'], f"freeze {trainable(m)}")
m = w(True, False)  # positional pass-through
check(seen[-1]["pre_process"] is True and seen[-1]["post_process"] is False, "positional")

args = types.SimpleNamespace(freeze_patterns=["input_layernorm.bias"],
                             trainable_patterns=["layernorm", "output_layer"])
ms = wrap(legacy_provider, args)(pre_process=True, post_process=False, add_encoder=False,
                                 add_decoder=True)
check(seen[-1]["add_encoder"] is False, "add_encoder not passed")
for mm in ms:
    check(trainable(mm) == ["decoder.input_layernorm.weight", "output_layer.weight"],
          f"trainable-only {trainable(mm)}")

m = wrap(provider, types.SimpleNamespace())()
check(len(trainable(m)) == len(list(m.parameters())), "no rules must freeze nothing")
m = wrap(provider, types.SimpleNamespace(freeze_patterns="output", trainable_patterns=[]))()
check("output_layer.weight" not in trainable(m) and len(trainable(m)) == 7, "string rule")
try:
    wrap(provider, types.SimpleNamespace(freeze_patterns=["("]))
    failures.append("bad regex accepted")
except ValueError:
    pass

print("failures:", failures)
print("PASS" if not failures else "FAIL")
sys.exit(1 if failures else 0)
