"""CPU check of owl.megatron.apply_mla_patch / undo_mla_patch.

Run with one of the megatron-core venvs and PYTHONPATH=/work/blind/owl:
    python checks/check_mla_patch.py
"""

import logging
import os
import sys

handlers_before = list(logging.getLogger().handlers)
env_before = dict(os.environ)

import owl  # noqa: E402
import owl.megatron  # noqa: E402
from owl.megatron import apply_mla_patch, is_mla_patch_applied, undo_mla_patch  # noqa: E402

assert not any(m == "megatron" or m.startswith("megatron.") for m in sys.modules), "imported megatron"
assert logging.getLogger().handlers == handlers_before
assert dict(os.environ) == env_before
assert not is_mla_patch_applied()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
torch.distributed.init_process_group("gloo", rank=0, world_size=1)

from megatron.core import package_info, parallel_state  # noqa: E402

parallel_state.initialize_model_parallel(1, 1)
# Test-harness only: Megatron's rotary embeddings ask torch.cuda for a device.
torch.cuda.current_device = lambda: "cpu"

from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # noqa: E402
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed  # noqa: E402
from megatron.core.transformer import multi_latent_attention as mla  # noqa: E402
from megatron.core.transformer.identity_op import IdentityOp  # noqa: E402
from megatron.core.transformer.spec_utils import build_module  # noqa: E402
from megatron.core.transformer.transformer_config import MLATransformerConfig  # noqa: E402

print("megatron-core", package_info.__version__)

ORIG_FWD = vars(mla.MultiLatentAttention)["forward"]
ORIG_QKV = vars(mla.MLASelfAttention)["get_query_key_value_tensors"]


class TorchCoreAttention(torch.nn.Module):
    """CPU stand-in for DotProductAttention (which needs CUDA buffers)."""

    def __init__(self, softmax_scale=None, **kwargs):
        super().__init__()
        self.scale = softmax_scale

    def forward(self, q, k, v, mask, packed_seq_params=None, attn_mask_type=None, **kw):
        s, b = q.shape[:2]
        q, k, v = (x.permute(1, 2, 0, 3) for x in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        return out.permute(2, 0, 1, 3).reshape(s, b, -1)


def build(rope_type, q_lora_rank):
    kw = dict(
        num_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=16,
        qk_head_dim=16,
        qk_pos_emb_head_dim=8,
        v_head_dim=16,
        rope_type=rope_type,
        normalization="RMSNorm",
        use_cpu_initialization=True,
        add_bias_linear=False,
        params_dtype=torch.float32,
    )
    if "qk_layernorm" in MLATransformerConfig.__dataclass_fields__:
        # 0.19 needs a fused norm+linear (TE) for a Q-norm without q_lora: run that case norm-free
        kw["qk_layernorm"] = q_lora_rank is not None
    config = MLATransformerConfig(**kw)
    spec = get_gpt_layer_local_spec(
        multi_latent_attention=True, qk_layernorm=True, normalization="RMSNorm"
    )
    spec.submodules.self_attention.submodules.core_attention = TorchCoreAttention
    if q_lora_rank is None:
        spec.submodules.self_attention.submodules.q_layernorm = IdentityOp
        spec.submodules.self_attention.submodules.kv_layernorm = IdentityOp
    torch.manual_seed(0)
    # Test-harness only: in the 0.16 venv TE is a stub (TELinear is not a class) while
    # HAVE_TE is True, so MLA's isinstance(..., TELinear) fails; build as if TE were absent.
    have_te = getattr(mla, "HAVE_TE", None)
    if have_te and not isinstance(getattr(mla, "TELinear", object), type):
        mla.HAVE_TE = False
    try:
        attn = build_module(spec.submodules.self_attention, config=config, layer_number=1)
    finally:
        if have_te is not None:
            mla.HAVE_TE = have_te
    return attn


def run(attn, x, **kw):
    x = x.clone().requires_grad_(True)
    out, _ = attn(x, None, **kw)
    out.sum().backward()
    return out.detach(), x.grad.detach()


model_parallel_cuda_manual_seed(0) if torch.cuda.is_available() else None

for rope_type, q_lora_rank in (("yarn", 32), ("rope", None), ("rope", 32)):
    attn = build(rope_type, q_lora_rank)
    x = torch.randn(10, 2, 64, generator=torch.Generator().manual_seed(1))
    ref_out, ref_grad = run(attn, x)

    apply_mla_patch()
    apply_mla_patch()  # idempotent
    assert is_mla_patch_applied()
    from owl.megatron import mla_0_13_1 as copies

    assert vars(mla.MultiLatentAttention)["forward"] is copies.mla_forward_0_13_1
    assert (
        vars(mla.MLASelfAttention)["get_query_key_value_tensors"]
        is copies.mla_get_query_key_value_tensors_0_13_1
    )
    attn.zero_grad()
    out, grad = run(attn, x, rotary_pos_cos_sin=None) if (
        package_info.MINOR >= 15
    ) else run(attn, x)
    q, k, v = attn.get_query_key_value_tensors(x)
    assert q.shape == (10, 2, 4, 24) and v.shape == (10, 2, 4, 16), (q.shape, v.shape)
    d_out = (out - ref_out).abs().max().item()
    d_grad = (grad - ref_grad).abs().max().item()
    print(f"  {rope_type:4s} q_lora={q_lora_rank}: max|patched-upstream| out={d_out:.3g} grad={d_grad:.3g}")
    assert d_out < 1e-5 and d_grad < 1e-5

    if copies._HAS_MLA_ROTARY_INTERLEAVED:
        # Sensitivity: without owl's mla_rotary_interleaved adaptation (0.19) the copy diverges.
        copies._HAS_MLA_ROTARY_INTERLEAVED = False
        try:
            bad, _ = run(attn, x)
        finally:
            copies._HAS_MLA_ROTARY_INTERLEAVED = True
        print(f"    (without the rope adaptation: max diff {(bad - ref_out).abs().max().item():.3g})")
        assert (bad - ref_out).abs().max().item() > 1e-6

    try:
        attn(x, None, rotary_pos_cos_sin=torch.ones(1))
    except NotImplementedError as e:
        assert "rotary_pos_cos_sin" in str(e)
    else:
        raise AssertionError("non-None extra kwarg accepted")

    undo_mla_patch()
    undo_mla_patch()  # idempotent
    assert not is_mla_patch_applied()
    assert vars(mla.MultiLatentAttention)["forward"] is ORIG_FWD
    assert vars(mla.MLASelfAttention)["get_query_key_value_tensors"] is ORIG_QKV

if package_info.MINOR >= 19:
    # Without owl's mla_rotary_interleaved adaptation the 0.13.1 rope would differ here.
    from owl.megatron.mla_0_13_1 import _rope_kwargs

    assert _rope_kwargs(attn.config) == {"mla_rotary_interleaved": True}

# Someone else patching on top -> undo refuses.
apply_mla_patch()
mla.MultiLatentAttention.forward = lambda self, *a, **k: None
try:
    undo_mla_patch()
except RuntimeError:
    pass
else:
    raise AssertionError("undo clobbered a foreign patch")
mla.MultiLatentAttention.forward = copies.mla_forward_0_13_1
undo_mla_patch()
assert vars(mla.MultiLatentAttention)["forward"] is ORIG_FWD

# Guard: a post-0.13.1 feature the copy cannot honour raises instead of running silently.
if hasattr(attn.config, "cache_mla_latents"):
    apply_mla_patch()
    attn.config.cache_mla_latents = True
    try:
        attn(x, None)
    except NotImplementedError as e:
        assert "cache_mla_latents" in str(e)
    else:
        raise AssertionError("cache_mla_latents accepted")
    finally:
        attn.config.cache_mla_latents = False
        undo_mla_patch()

# Unsupported version: clear error at apply time, nothing patched.
saved_minor = package_info.MINOR
package_info.MINOR = 12
try:
    apply_mla_patch()
except RuntimeError as e:
    assert "0.12" in str(e), e
else:
    raise AssertionError("0.12 accepted")
finally:
    package_info.MINOR = saved_minor
assert not is_mla_patch_applied() and vars(mla.MultiLatentAttention)["forward"] is ORIG_FWD

torch.distributed.destroy_process_group()
print("OK")
