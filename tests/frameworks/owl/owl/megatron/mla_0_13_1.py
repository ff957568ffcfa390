"""Megatron-Core 0.13.1 Multi-Latent Attention methods, kept by owl.

owl's RL trainer was validated against megatron-core 0.13.1's MLA.  This module
holds copies of two methods from
``megatron/core/transformer/multi_latent_attention.py`` of megatron-core
**0.13.1**:

* ``MultiLatentAttention.forward``            -> :func:`mla_forward_0_13_1`
* ``MLASelfAttention.get_query_key_value_tensors`` -> :func:`mla_get_query_key_value_tensors_0_13_1`

The bodies are 0.13.1's.  The only edits (each marked ``owl:``) are those the
bodies need to run with the same meaning on 0.15.3 / 0.16.1 / 0.19.2:

1. ``self.model_comm_pgs.cp`` -> ``_cp_group(self)`` (0.15 renamed the
   attribute to ``pg_collection``).
2. ``apply_rotary_pos_emb(...)`` receives ``mla_rotary_interleaved=...`` where
   the installed Megatron has that parameter (0.19): there the MLA-style
   interleave is no longer derived from ``config.multi_latent_attention`` and
   would otherwise be silently skipped.  The value reproduces what 0.13.1's
   ``apply_rotary_pos_emb`` did (see :func:`_rope_kwargs`).
3. ``forward`` accepts ``**kwargs`` (newer ``TransformerLayer`` passes
   ``rotary_pos_cos_sin=``); they are not used.
4. Each method starts with a guard that raises ``NotImplementedError`` for
   features added after 0.13.1 that this code cannot honour (they are all
   absent on 0.13.1, so the guard never fires there).

This module imports Megatron at import time (like the upstream file); it is
imported only by :func:`owl.megatron.apply_mla_patch`.
"""

import inspect

import torch

from megatron.core import parallel_state, tensor_parallel
from megatron.core.models.common.embeddings import apply_rotary_pos_emb
from megatron.core.tensor_parallel.mappings import (
    gather_from_sequence_parallel_region,
    gather_from_tensor_model_parallel_region,
    scatter_to_sequence_parallel_region,
)
from megatron.core.utils import deprecate_inference_params

try:
    from megatron.core.fusions.fused_mla_yarn_rope_apply import (
        fused_apply_mla_rope_for_kv,
        fused_apply_mla_rope_for_q,
    )
except:  # noqa: E722  (as upstream 0.13.1)
    fused_apply_mla_rope_for_kv = None
    fused_apply_mla_rope_for_q = None

SOURCE_VERSION = "0.13.1"

# --------------------------------------------------------------------------
# owl: compatibility helpers (not part of the 0.13.1 code)
# --------------------------------------------------------------------------

_HAS_MLA_ROTARY_INTERLEAVED = (
    "mla_rotary_interleaved" in inspect.signature(apply_rotary_pos_emb).parameters
)


def _cp_group(module):
    """0.13.1 read ``self.model_comm_pgs.cp``; 0.15+ names it ``pg_collection``."""
    pgs = getattr(module, "pg_collection", None)
    if pgs is None:
        pgs = module.model_comm_pgs
    return pgs.cp


def _rope_kwargs(config):
    """Extra kwargs for ``apply_rotary_pos_emb`` so it behaves as in 0.13.1.

    0.13.1's ``apply_rotary_pos_emb`` applied the MLA interleave
    (``multi_latent_attention=config.multi_latent_attention``) only on its
    unfused path; its fused path (``config.apply_rope_fusion``) never did.
    0.19 takes the choice from an explicit ``mla_rotary_interleaved`` argument
    (default False) and, when it is True, falls back from the fused to the
    unfused kernel.  Passing ``multi_latent_attention and not apply_rope_fusion``
    gives 0.13.1's result on both paths.  Before 0.19 nothing is passed.
    """
    if not _HAS_MLA_ROTARY_INTERLEAVED:
        return {}
    return {
        "mla_rotary_interleaved": bool(config.multi_latent_attention)
        and not config.apply_rope_fusion
    }


def _unsupported(feature):
    raise NotImplementedError(
        f"owl MLA patch: {feature} is not supported by the megatron-core {SOURCE_VERSION} "
        "MLA code that owl.megatron.apply_mla_patch() installs. Call "
        "owl.megatron.undo_mla_patch() to use the installed Megatron's own MLA."
    )


def _check_forward_supported(module, inference_context, extra_kwargs):
    """Reject inputs/config that 0.13.1's forward cannot honour on newer Megatron."""
    for name, value in extra_kwargs.items():
        if value is not None:
            _unsupported(f"the forward argument {name!r} (non-None)")
    config = module.config
    if getattr(config, "cache_mla_latents", False):
        _unsupported("config.cache_mla_latents=True")
    if (
        hasattr(config, "cache_mla_latents")
        and inference_context is not None
        and not inference_context.is_static_batching()
    ):
        _unsupported("the dynamic-batching inference backend")
    if getattr(config, "experimental_attention_variant", None) == "dsa" or getattr(
        module.core_attention, "requires_dsa_inputs", False
    ):
        _unsupported("experimental_attention_variant='dsa'")
    for attr in ("offload_qkv_linear", "offload_core_attention", "offload_attn_proj"):
        if getattr(module, attr, False):
            _unsupported(f"fine-grained activation offloading ({attr})")


def _check_qkv_supported(module, packed_seq_params):
    """Reject modules/inputs that 0.13.1's get_query_key_value_tensors cannot handle."""
    if not hasattr(module, "linear_kv_down_proj"):
        _unsupported(f"{type(module).__name__} (fused q/kv down projection)")
    if getattr(packed_seq_params, "local_cp_size", None) is not None:
        _unsupported("hybrid context parallel (packed_seq_params.local_cp_size)")
    if module.recompute_up_proj and getattr(module.config, "fp4", None):
        _unsupported("recompute of mla_up_proj with fp4")


# --------------------------------------------------------------------------
# MultiLatentAttention.forward  (megatron-core 0.13.1)
# --------------------------------------------------------------------------


def mla_forward_0_13_1(
    self,
    hidden_states,
    attention_mask,
    key_value_states=None,
    inference_context=None,
    rotary_pos_emb=None,
    rotary_pos_cos=None,
    rotary_pos_sin=None,
    attention_bias=None,
    packed_seq_params=None,
    position_ids=None,
    sequence_len_offset=None,
    *,
    inference_params=None,
    **kwargs,  # owl: accepted for newer callers (e.g. rotary_pos_cos_sin); not used
):
    """Forward pass for multi-latent attention"""
    assert rotary_pos_emb is None, "Rotary position embeddings should not be passed into MLA."
    assert attention_bias is None, "Attention bias should not be passed into MLA."
    assert (
        rotary_pos_cos is None and rotary_pos_sin is None
    ), "MLA does not support Flash Decoding"

    # hidden_states: [sq, b, h]

    inference_context = deprecate_inference_params(inference_context, inference_params)

    # owl: refuse post-0.13.1 features this code cannot honour
    _check_forward_supported(self, inference_context, kwargs)

    # =====================
    # Query, Key, and Value
    # =====================
    # Get the query, key and value tensors based on the type of attention -
    # self or cross attn.
    # query: [96, 1, 16, 128], key:[96, 1, 16, 128], value:[96, 1, 16, 128]
    query, key, value = self.get_query_key_value_tensors(
        hidden_states,
        key_value_states,
        position_ids,
        packed_seq_params,
        inference_context=inference_context,
    )

    # ===================================================
    # Adjust key, value for inference
    # ===================================================
    # rotary_pos_emb = None
    query, key, value, _, attn_mask_type, _ = self._adjust_key_value_for_inference(
        inference_context, query, key, value, rotary_pos_emb=None
    )

    # TODO: Currently, TE can only accept contiguous tensors for MLA
    query = query.contiguous()
    key = key.contiguous()
    value = value.contiguous()

    # ==================================
    # core attention computation
    # ==================================
    # Need corresponding TE change
    if self.checkpoint_core_attention and self.training:
        core_attn_out = self._checkpointed_attention_forward(
            query, key, value, attention_mask, packed_seq_params=packed_seq_params
        )
    else:
        core_attn_out = self.core_attention(
            query,
            key,
            value,
            attention_mask,
            packed_seq_params=packed_seq_params,
            attn_mask_type=attn_mask_type,
        )

    if packed_seq_params is not None and packed_seq_params.qkv_format == 'thd':
        # reshape to same output shape as unpacked case
        # (t, np, hn) -> (t, b=1, h=np*hn)
        # t is the pack size = sum (sq_i)
        # note that batch is a dummy dimension in the packed case
        core_attn_out = core_attn_out.reshape(core_attn_out.size(0), 1, -1)

    if self.recompute_up_proj:
        assert self.qkv_up_checkpoint is not None
        self.qkv_up_checkpoint.discard_output_and_register_recompute(core_attn_out)
        self.qkv_up_checkpoint = None

    # =================
    # Output. [sq, b, h]
    # =================
    output, bias = self.linear_proj(core_attn_out)

    return output, bias


# --------------------------------------------------------------------------
# MLASelfAttention.get_query_key_value_tensors  (megatron-core 0.13.1)
# --------------------------------------------------------------------------


def mla_get_query_key_value_tensors_0_13_1(
    self,
    hidden_states,
    key_value_states=None,
    position_ids=None,
    packed_seq_params=None,
    inference_context=None,
    *,
    inference_params=None,
):
    """
    Derives `query`, `key` and `value` tensors from `hidden_states`.
    """
    # s = sequence length, b = batch size, h = hidden size, n = num attention heads
    # Attention heads [s, b, n*h]
    assert (
        hidden_states.ndim == 3
    ), f"hidden_states should be 3D, [s, b, n*h], got {hidden_states.ndim}D"

    inference_context = deprecate_inference_params(inference_context, inference_params)

    # owl: refuse post-0.13.1 modules/inputs this code cannot handle
    _check_qkv_supported(self, packed_seq_params)

    # =========================================
    # Prepare RoPE and seqlen related params
    # =========================================
    rotary_seq_len = self.rotary_pos_emb.get_rotary_seq_len(
        inference_context, None, hidden_states, self.config, packed_seq_params
    )

    # rotary_pos_emb:[s, b, 1, 64]
    mscale = 1.0
    rotary_pos_cos = None
    rotary_pos_sin = None
    if self.config.rope_type == "rope":
        packed_seq = packed_seq_params is not None and packed_seq_params.qkv_format == 'thd'
        rotary_pos_emb = self.rotary_pos_emb(rotary_seq_len, packed_seq=packed_seq)
    else:
        if self.config.apply_rope_fusion:
            rotary_pos_cos, rotary_pos_sin = self.rotary_pos_emb.get_cached_cos_sin(
                rotary_seq_len, dtype=hidden_states.dtype
            )
            rotary_pos_emb = None
            assert inference_context is None, "Inference with MLA RoPE fusion is not supported"
            assert (
                fused_apply_mla_rope_for_q is not None and fused_apply_mla_rope_for_kv is not None
            ), "Fused MLA RoPE apply is not imported successfully"
        else:
            rotary_pos_emb, mscale = self.rotary_pos_emb(rotary_seq_len)

    if packed_seq_params is not None:
        cu_seqlens_q = packed_seq_params.cu_seqlens_q
        cu_seqlens_kv = packed_seq_params.cu_seqlens_kv
    else:
        cu_seqlens_q = cu_seqlens_kv = None

    # =========================================
    # QKV down projection and layernorm
    # =========================================
    if self.config.q_lora_rank is not None:
        # if linear_q_down_proj is ColumnParallelLinear:
        #     q_compressed: [s, b, q_lora_rank / TP]
        # elif linear_q_down_proj is Linear:
        #     q_compressed: [s / TP, b, q_lora_rank]
        q_compressed, _ = self.linear_q_down_proj(hidden_states)

        # When output is sharded (ColumnParallelLinear), two things are needed to be
        # identical to a normal Linear.
        #   1. Manually gather output to restore output dim q_lora_rank;
        #   2. Scatter sequence back to s / TP if sequence-parallel since it was
        #      gathered by ColumnParallelLinear.
        if q_compressed.size(-1) != self.config.q_lora_rank:
            q_compressed = gather_from_tensor_model_parallel_region(q_compressed)
            if self.config.sequence_parallel:
                q_compressed = scatter_to_sequence_parallel_region(q_compressed)
    else:
        q_compressed = hidden_states

    # if linear_kv_down_proj is ColumnParallelLinear:
    #     kv_combined: [s, b, (kv_lora_rank + qk_pos_emb_head_dim) / TP]
    # elif linear_kv_down_proj is Linear:
    #     kv_combined: [s / TP, b, (kv_lora_rank + qk_pos_emb_head_dim)]
    kv_combined, _ = self.linear_kv_down_proj(hidden_states)
    if kv_combined.size(-1) != self.config.kv_lora_rank + self.config.qk_pos_emb_head_dim:
        # kv_combined: [s, b, (kv_lora_rank + qk_pos_emb_head_dim)]
        kv_combined = gather_from_tensor_model_parallel_region(kv_combined)
        # kv_compressed:[s, b, kv_lora_rank], k_pos_emb: [s, b, qk_pos_emb_head_dim]
        kv_compressed, k_pos_emb = torch.split(
            kv_combined, [self.config.kv_lora_rank, self.config.qk_pos_emb_head_dim], dim=-1
        )
        if self.config.sequence_parallel:
            # kv_compressed:[s / TP, b, kv_lora_rank]
            kv_compressed = scatter_to_sequence_parallel_region(kv_compressed)
    else:
        # kv_compressed:[s / TP, b, kv_lora_rank], k_pos_emb: [s / TP, b, qk_pos_emb_head_dim]
        kv_compressed, k_pos_emb = torch.split(
            kv_combined, [self.config.kv_lora_rank, self.config.qk_pos_emb_head_dim], dim=-1
        )
        if parallel_state.get_tensor_model_parallel_world_size() > 1:
            # k_pos_emb: [s, b, qk_pos_emb_head_dim]
            k_pos_emb = gather_from_sequence_parallel_region(k_pos_emb)

    if packed_seq_params is not None:
        # If sequence packing, TE expect [t, h, d] shaped qkv input.
        # In Megatron-Core, the qkv shape is [t, 1, h, d].
        # So we need to reshape qkv from [t, 1, h, d] to [t, h, d].
        q_compressed = q_compressed.squeeze(1)
        kv_compressed = kv_compressed.squeeze(1)
        k_pos_emb = k_pos_emb.squeeze(1)

    # =========================================
    # QKV up projection and RoPE apply
    # =========================================
    def qkv_up_proj_and_rope_apply(q_compressed, kv_compressed, k_pos_emb, rotary_pos_emb):
        """
        Apply the up projection and RoPE to the query and key.
        When sequence packing enabled, the input tensors adopt a packed shape of [t, ...];
        otherwise, they maintain the unpacked shape [s, b, ...]. In subsequent code comments,
        we uniformly use [num_tokens, ...] to denote [s, b, ...] or [t, ...] for two cases.
        """
        if self.config.q_lora_rank is not None:
            # q_compressed: [num_tokens, q_lora_rank]
            # q: [num_tokens, n * (qk_head_dim + qk_pos_emb_head_dim)]
            q_compressed = self.q_layernorm(q_compressed)
            q, _ = self.linear_q_up_proj(q_compressed)
        else:
            # q_compressed: [num_tokens, hidden_size]
            # q: [num_tokens, n * (qk_head_dim + qk_pos_emb_head_dim)]
            q, _ = self.linear_q_proj(q_compressed)

        # q: [num_tokens, n, q_head_dim]
        q = q.view(*q.size()[:-1], self.num_attention_heads_per_partition, self.q_head_dim)

        kv_compressed = self.kv_layernorm(kv_compressed)
        # kv: [num_tokens, n * (qk_head_dim + v_head_dim)]
        kv, _ = self.linear_kv_up_proj(kv_compressed)

        # kv: [num_tokens, n, (qk_head_dim + v_head_dim)]
        kv = kv.view(
            *kv.size()[:-1],
            self.num_attention_heads_per_partition,
            self.config.qk_head_dim + self.config.v_head_dim,
        )

        # [num_tokens, qk_pos_emb_head_dim] -> [num_tokens, 1, qk_pos_emb_head_dim]
        k_pos_emb = torch.unsqueeze(k_pos_emb, -2)

        if self.config.apply_rope_fusion:
            query = fused_apply_mla_rope_for_q(
                q,
                rotary_pos_cos,
                rotary_pos_sin,
                self.config.qk_head_dim,
                self.config.qk_pos_emb_head_dim,
                cu_seqlens_q,
            )
            key, value = fused_apply_mla_rope_for_kv(
                kv,
                k_pos_emb,
                rotary_pos_cos,
                rotary_pos_sin,
                self.config.qk_pos_emb_head_dim,
                self.config.qk_head_dim,
                self.config.v_head_dim,
                cu_seqlens_kv,
            )
        else:
            q_len = q.size()[0]
            if inference_context is not None:
                # add offset to the sequence start for inference
                sequence_start = inference_context.sequence_len_offset
                sequence_end = sequence_start + q_len
                rotary_pos_emb = rotary_pos_emb[sequence_start:sequence_end]
            else:
                # Shorten rotary_pos_emb to the sequence length when inference_params
                # is not provided. This makes sure we can run forward directly with
                # any sequence length. During training, the sequence length is always
                # the full rotary_pos_emb length.
                rotary_pos_emb = rotary_pos_emb[0:q_len]

            # q_no_pe: [num_tokens, n, qk_head_dim]
            # q_pos_emb: [num_tokens, n, qk_pos_emb_head_dim]
            q_no_pe, q_pos_emb = torch.split(
                q, [self.config.qk_head_dim, self.config.qk_pos_emb_head_dim], dim=-1
            )

            # k_no_pe: [num_tokens, n, qk_head_dim]
            # value: [num_tokens, n, v_head_dim]
            k_no_pe, value = torch.split(
                kv, [self.config.qk_head_dim, self.config.v_head_dim], dim=-1
            )

            # q_pos_emb: [num_tokens, n, qk_pos_emb_head_dim]
            q_pos_emb = apply_rotary_pos_emb(
                q_pos_emb,
                rotary_pos_emb,
                config=self.config,
                cu_seqlens=cu_seqlens_q,
                mscale=mscale,
                cp_group=_cp_group(self),  # owl: was self.model_comm_pgs.cp
                **_rope_kwargs(self.config),  # owl: keep 0.13.1's MLA interleave on 0.19
            )
            # k_pos_emb:[num_tokens, 1, qk_pos_emb_head_dim]
            k_pos_emb = apply_rotary_pos_emb(
                k_pos_emb,
                rotary_pos_emb,
                config=self.config,
                cu_seqlens=cu_seqlens_kv,
                mscale=mscale,
                cp_group=_cp_group(self),  # owl: was self.model_comm_pgs.cp
                **_rope_kwargs(self.config),  # owl: keep 0.13.1's MLA interleave on 0.19
            )

            # query: [num_tokens, n, (qk_head_dim + v_head_dim)]
            query = torch.cat([q_no_pe, q_pos_emb], dim=-1)

            # key: [num_tokens, n, (qk_head_dim + v_head_dim)]
            if k_pos_emb.ndim == 4:
                k_pos_emb = k_pos_emb.expand(-1, -1, self.num_attention_heads_per_partition, -1)
            else:
                assert k_pos_emb.ndim == 3
                k_pos_emb = k_pos_emb.expand(-1, self.num_attention_heads_per_partition, -1)
            key = torch.cat([k_no_pe, k_pos_emb], dim=-1)

        query = query.contiguous()
        key = key.contiguous()
        value = value.contiguous()
        return query, key, value

    if self.recompute_up_proj:
        self.qkv_up_checkpoint = tensor_parallel.CheckpointWithoutOutput(fp8=self.config.fp8)
        query, key, value = self.qkv_up_checkpoint.checkpoint(
            qkv_up_proj_and_rope_apply, q_compressed, kv_compressed, k_pos_emb, rotary_pos_emb
        )
    else:
        query, key, value = qkv_up_proj_and_rope_apply(
            q_compressed, kv_compressed, k_pos_emb, rotary_pos_emb
        )

    return query, key, value

