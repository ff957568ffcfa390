"""CPU check of swift.megatron.instrument_model / restore_model.

Run: PYTHONPATH=/work/blind/swift <venv>/bin/python checks/check_instrument.py
"""

import copy
import inspect
import os
import socket
import sys
import warnings

import torch

import swift.megatron as sm

# 1. importing the adapter neither imports nor patches Megatron
assert not any(m == "megatron" or m.startswith("megatron.") for m in sys.modules), "megatron imported"

import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.package_info import __version__ as mcore_version
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.transformer.transformer_layer import TransformerLayer

CLASS_FORWARD = TransformerLayer.__dict__["forward"]


def init_dist():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)


class CpuCoreAttention(torch.nn.Module):
    """Stand-in for DotProductAttention (which allocates its buffer on CUDA)."""

    def forward(self, query, key, value, attention_mask=None, *args, **kwargs):
        # [s, b, h, d] -> [b, h, s, d]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        s, b = query.shape[0], query.shape[1]
        return o.permute(2, 0, 1, 3).reshape(s, b, -1)


def build(seed=0):
    torch.manual_seed(seed)
    cfg = TransformerConfig(
        num_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=64,
        max_sequence_length=16,
    )
    for layer in model.decoder.layers:
        layer.self_attention.core_attention = CpuCoreAttention()
    return model


def inputs(b=2, s=8):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (b, s), generator=g)
    pos = torch.arange(s).unsqueeze(0).expand(b, s)
    mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1).view(1, 1, s, s)
    return ids, pos, mask


def layers_of(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, TransformerLayer)]


def main():
    init_dist()
    model = build()
    model.eval()
    ids, pos, mask = inputs()
    layers = layers_of(model)
    assert len(layers) == 2, layers
    sig_before = [inspect.signature(l.forward) for _, l in layers]

    with torch.no_grad():
        ref = model(ids, pos, mask)

    # independent reference: forward hooks see what __call__ returns
    hook_vals = {}
    handles = [
        l.register_forward_hook(
            lambda mod, a, kw, out, n=n: hook_vals.__setitem__(n, out[0].abs().mean().item()),
            with_kwargs=True,
        )
        for n, l in layers
    ]

    stats = sm.instrument_model(model)
    assert stats is sm.ACTIVATION_STATS
    assert sm.is_instrumented(model)
    assert TransformerLayer.__dict__["forward"] is CLASS_FORWARD, "class was touched"
    for (n, l), sig in zip(layers, sig_before):
        assert "forward" in l.__dict__ and l.forward.__self__ is l
        assert inspect.signature(l.forward) == sig, (inspect.signature(l.forward), sig)
    try:
        sm.instrument_model(model)
        raise AssertionError("double instrument accepted")
    except RuntimeError:
        pass

    with torch.no_grad():
        out = model(ids, pos, mask)
    assert torch.equal(out, ref), "output changed"
    assert set(stats) == {"decoder.layers.0", "decoder.layers.1"}, stats
    for n, _ in layers:
        assert abs(stats[n] - hook_vals[n]) <= 1e-6 * max(1.0, abs(hook_vals[n])), (n, stats[n], hook_vals[n])
    for h in handles:
        h.remove()

    # training step through the wrapper (autograd intact)
    model.train()
    model.zero_grad()
    model(ids, pos, mask).float().sum().backward()
    assert all(p.grad is not None for p in model.decoder.layers[0].parameters() if p.requires_grad)

    # deep copy of an instrumented model runs its own layers
    # (process groups cannot be deep-copied; share them, as a real copy would)
    memo = {}
    for v in vars(parallel_state).values():
        if isinstance(v, dist.ProcessGroup):
            memo[id(v)] = v
    for m in model.modules():
        for v in vars(m).values():
            if isinstance(v, dist.ProcessGroup) or type(v).__name__ == "ProcessGroupCollection":
                memo[id(v)] = v
    twin = copy.deepcopy(model, memo)
    tl = layers_of(twin)
    assert all(l.forward.__self__ is l for _, l in tl)
    twin.eval()
    with torch.no_grad():
        assert torch.equal(twin(ids, pos, mask), ref)
    assert sm.restore_model(twin) == 2 and not sm.is_instrumented(twin)
    assert sm.is_instrumented(model)

    # restore: instances back exactly as they were
    assert sm.restore_model(model) == 2
    assert sm.restore_model(model) == 0
    for n, l in layers:
        assert "forward" not in l.__dict__, n
        assert l.forward.__func__ is CLASS_FORWARD
    assert TransformerLayer.__dict__["forward"] is CLASS_FORWARD
    model.eval()
    sm.clear_activation_stats()
    with torch.no_grad():
        assert torch.equal(model(ids, pos, mask), ref)
    assert sm.ACTIVATION_STATS == {}, "recording after restore"

    # pass-through of arbitrary args/kwargs and return value; pre-existing instance forward kept
    layer = layers[0][1]
    seen = {}
    sentinel = (torch.ones(3) * -2.0, "ctx")

    def fake_forward(*args, **kwargs):
        seen["args"], seen["kwargs"] = args, kwargs
        return sentinel

    layer.forward = fake_forward
    mine = {}
    sm.instrument_model(model, mine, prefix="m.")
    res = layer(1, 2, hidden_states=None, brand_new_kwarg_from_future_megatron=3)
    assert res is sentinel, "return value not passed through unchanged"
    assert seen["args"] == (1, 2)
    assert seen["kwargs"] == {"hidden_states": None, "brand_new_kwarg_from_future_megatron": 3}
    assert mine == {"m.decoder.layers.0": 2.0}, mine
    # someone patching over us -> restore refuses
    ours = layer.forward
    layer.forward = lambda *a, **k: None
    try:
        sm.restore_model(model)
        raise AssertionError("restore over foreign patch accepted")
    except RuntimeError:
        pass
    layer.forward = ours
    assert sm.restore_model(model) == 2
    assert layer.__dict__["forward"] is fake_forward
    del layer.forward
    assert "forward" not in layer.__dict__

    # model chunks (virtual pipeline style) naming
    other = build(seed=1)
    got = sm.instrument_model([model, other], {})
    with torch.no_grad():
        other(ids, pos, mask)
    assert set(got) == {"1.decoder.layers.0", "1.decoder.layers.1"}, got
    assert sm.restore_model([model, other]) == 4

    # empty model warns, does not raise
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sm.instrument_model(torch.nn.Linear(2, 2), {})
    assert any("no TransformerLayer" in str(x.message) for x in w)

    print(f"OK megatron-core {mcore_version} torch {torch.__version__}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
