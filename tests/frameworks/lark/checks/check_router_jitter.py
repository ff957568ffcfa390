"""CPU check of lark's router jitter patch against the installed megatron-core.

Run: PYTHONPATH=/work/blind/lark <nox python> checks/check_router_jitter.py
"""

import sys
import types

import torch

import lark.megatron as lm

assert not any(m == "megatron" or m.startswith("megatron.") for m in sys.modules), (
    "importing lark.megatron imported Megatron"
)
assert not lm.is_router_jitter_enabled()

from megatron.core import package_info  # noqa: E402
from megatron.core.transformer.moe.router import Router, TopKRouter  # noqa: E402
from megatron.core.transformer.transformer_config import TransformerConfig  # noqa: E402

print("megatron-core", package_info.__version__)

# Megatron's gating moves CPU weights to torch.cuda.current_device(); on this CPU-only
# box make that "cpu" (check-only hack, not part of lark).
torch.cuda.current_device = lambda: "cpu"
# megatron-core 0.13.1 without Transformer Engine references an undefined
# te_general_gemm in RouterGatingLinearFunction (upstream bug); check-only workaround.
from megatron.core.transformer.moe import moe_utils  # noqa: E402

if not hasattr(moe_utils, "te_general_gemm"):
    moe_utils.te_general_gemm = None

assert "gating" not in TopKRouter.__dict__
orig_attr = TopKRouter.gating

torch.manual_seed(0)
cfg = TransformerConfig(
    num_layers=1,
    hidden_size=16,
    num_attention_heads=1,
    num_moe_experts=8,
    moe_router_topk=2,
    moe_aux_loss_coeff=0.0,
    moe_router_load_balancing_type="none",
    use_cpu_initialization=True,
    add_bias_linear=False,
)
pgs = types.SimpleNamespace(tp=None, cp=None, tp_cp=None, tp_dp_cp=None, ep=None)
router = TopKRouter(cfg, pgs)
router.set_layer_number(3)
x = torch.randn(5, 2, 16)


def run(train):
    router.train(train)
    xi = x.clone().requires_grad_(True)
    probs, routing_map = router(xi)
    probs.sum().backward()
    return probs.detach(), routing_map, xi.grad


base_train = run(True)
base_eval = run(False)
base_logits = Router.gating(router, x)

# errors at apply time
for bad in (-0.1, 1.0, float("nan"), "0.1", True):
    try:
        lm.enable_router_jitter(bad)
    except (TypeError, ValueError):
        pass
    else:
        raise AssertionError(f"accepted eps={bad!r}")
assert "gating" not in TopKRouter.__dict__

eps = 0.05
lm.enable_router_jitter(eps)
assert lm.is_router_jitter_enabled() and lm.get_router_jitter_eps() == eps
assert TopKRouter.__dict__["gating"] is lm.router_jitter._lark_jittered_gating
lm.enable_router_jitter(eps)  # idempotent: no stacking
assert lm.router_jitter._megatron_gating is Router.__dict__["gating"]

# eval: unchanged
router.eval()
assert torch.equal(router.gating(x), base_logits)
p, m, g = run(False)
assert torch.equal(p, base_eval[0]) and torch.equal(m, base_eval[1])

# train: jittered, bounded, deterministic
router.train()
j1 = router.gating(x)
j2 = router.gating(x)
assert torch.equal(j1, j2), "jitter not deterministic"
assert not torch.equal(j1, base_logits), "no jitter applied in training"
ratio = j1 / base_logits
assert ((ratio - 1).abs() <= eps + 1e-6).all(), ratio
assert j1.shape == base_logits.shape and j1.dtype == base_logits.dtype
rng_before = torch.get_rng_state()
p, m, g = run(True)  # full forward + backward through Megatron's forward/routing
assert torch.equal(rng_before, torch.get_rng_state()), "jitter touched the RNG"
assert p.shape == base_train[0].shape and m.shape == base_train[1].shape and g is not None
# different layer -> different pattern
router.set_layer_number(4)
assert not torch.equal(router.gating(x), j1)
router.set_layer_number(3)

# module-level setting controls it
lm.enable_router_jitter(0.0)
assert torch.equal(router.gating(x), base_logits)
lm.enable_router_jitter(eps)

lm.disable_router_jitter()
assert not lm.is_router_jitter_enabled() and lm.get_router_jitter_eps() == 0.0
assert "gating" not in TopKRouter.__dict__ and TopKRouter.gating is orig_attr
p, m, g = run(True)
assert torch.equal(p, base_train[0]) and torch.equal(m, base_train[1])
assert torch.equal(g, base_train[2])
lm.disable_router_jitter()  # no-op

# someone else patched on top of lark -> undo refuses
lm.enable_router_jitter(eps)
TopKRouter.gating = lambda self, input: Router.gating(self, input)
try:
    lm.disable_router_jitter()
except RuntimeError:
    pass
else:
    raise AssertionError("undo overwrote a foreign patch")
del TopKRouter.gating
lm.router_jitter._patched_cls = None  # reset lark's bookkeeping for this test only
lm.router_jitter._megatron_gating = None
lm.router_jitter._jitter_eps = 0.0
assert "gating" not in TopKRouter.__dict__

print("OK")
