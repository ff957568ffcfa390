"""Single-process checks: the splitter, install/uninstall reversibility, the provider wrapper."""

import inspect
import os
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from petrel.mcore import (  # noqa: E402
    chunked_allreduce_non_tensor_model_parallel_grads as ours,
    install,
    installed_chunk_bytes,
    is_installed,
    patched,
    split_grads_by_dtype,
    uninstall,
    wrap,
)

# ---------------------------------------------------------------- splitter
f32 = [torch.zeros(4), torch.zeros(2), torch.zeros(3)]  # 16, 8, 12 bytes
b16 = [torch.zeros(4, dtype=torch.bfloat16), torch.zeros(10, dtype=torch.bfloat16)]  # 8, 20
mixed = [f32[0], b16[0], f32[1], b16[1], f32[2]]
chunks = split_grads_by_dtype(mixed, 24)
assert all(len({t.dtype for t in c}) == 1 for c in chunks)
assert [[id(t) for t in c] for c in chunks] == [
    [id(f32[0]), id(f32[1])],
    [id(f32[2])],
    [id(b16[0])],
    [id(b16[1])],
], chunks
for c in chunks:
    assert len(c) == 1 or sum(t.numel() * t.element_size() for t in c) <= 24
# buffer dtype counting: bf16 counted at 4 bytes -> 16 + 40 bytes
assert [len(c) for c in split_grads_by_dtype(b16, 28)] == [2]
assert [len(c) for c in split_grads_by_dtype(b16, 28, buffer_dtype=torch.float32)] == [1, 1]
# oversize grad alone; huge budget -> one chunk per dtype; empty input
assert [len(c) for c in split_grads_by_dtype(f32, 1)] == [1, 1, 1]
assert [len(c) for c in split_grads_by_dtype(mixed, 10**9)] == [3, 2]
assert split_grads_by_dtype([], 8) == []
for bad, exc in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
    try:
        split_grads_by_dtype(f32, bad)
    except exc:
        pass
    else:
        raise AssertionError(bad)

# ---------------------------------------------------------------- install / uninstall
import importlib  # noqa: E402

fmg = importlib.import_module("megatron.core.distributed.finalize_model_grads")  # the module, not the function

before = dict(fmg.__dict__)
try:
    install()  # budget is required
except TypeError:
    pass
else:
    raise AssertionError("install() without budget accepted")
install(1 << 20)
assert is_installed() and installed_chunk_bytes() == 1 << 20
assert fmg._allreduce_non_tensor_model_parallel_grads is ours
assert fmg._allreduce_layernorm_grads is ours
assert fmg.finalize_model_grads.__globals__ is fmg.__dict__
install(4096)  # re-install: only the budget changes
assert installed_chunk_bytes() == 4096
uninstall()
uninstall()  # idempotent
assert fmg.__dict__.keys() == before.keys() and all(fmg.__dict__[k] is v for k, v in before.items())
with patched(128):
    assert fmg._allreduce_non_tensor_model_parallel_grads is ours
assert all(fmg.__dict__[k] is v for k, v in before.items()) and not is_installed()
try:
    ours([], SimpleNamespace())
except RuntimeError:
    pass
else:
    raise AssertionError("uninstalled replacement ran without a budget")

# ---------------------------------------------------------------- provider wrapper
calls = []


def provider(pre_process=True, post_process=True, vp_stage=None, config=None, pg_collection=None):
    calls.append((pre_process, post_process, vp_stage, config, pg_collection))
    m = torch.nn.Module()
    m.embedding = torch.nn.Embedding(4, 2)
    m.decoder = torch.nn.Linear(2, 2)
    m.output_layer = torch.nn.Linear(2, 4)
    m.shared = m.embedding  # shared module: same params under two names
    return m


args = SimpleNamespace(petrel_freeze=[r"^decoder\.bias$"], petrel_trainable=[r"decoder", r"output"])
wrapped = wrap(provider, args)
assert inspect.signature(wrapped) == inspect.signature(provider)
sentinel_cfg, sentinel_pg = object(), object()
model = wrapped(pre_process=False, post_process=True, vp_stage=1, config=sentinel_cfg, pg_collection=sentinel_pg)
assert calls[-1] == (False, True, 1, sentinel_cfg, sentinel_pg)
model2 = wrapped(True, False)  # older call style, positional
assert calls[-1] == (True, False, None, None, None)
for m in (model, model2):
    state = {n: p.requires_grad for n, p in m.named_parameters()}
    assert state == {
        "embedding.weight": False,
        "decoder.weight": True,
        "decoder.bias": False,
        "output_layer.weight": True,
        "output_layer.bias": True,
    }, state
# no rules / missing attributes: nothing frozen
m = wrap(provider, SimpleNamespace())()
assert all(p.requires_grad for p in m.parameters())
m = wrap(provider, SimpleNamespace(petrel_freeze=None, petrel_trainable=[]))()
assert all(p.requires_grad for p in m.parameters())
# a single string is one pattern; a shared param is judged by all of its names
m = wrap(provider, SimpleNamespace(petrel_freeze=r"^shared\."))()
assert not m.embedding.weight.requires_grad and m.decoder.weight.requires_grad
# list-of-modules provider result
wl = wrap(lambda **kw: [provider(**kw), provider(**kw)], SimpleNamespace(petrel_freeze=["weight"]))
assert all(not p.requires_grad for mm in wl() for n, p in mm.named_parameters() if "weight" in n)
print("check_split_and_provider: OK")
