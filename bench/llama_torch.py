#!/usr/bin/python3
"""PyTorch reference of resources/examples/llama-char.paralab.json and moe-char.paralab.json
(docs/experiment-format.md, "Today's models"): Llama's block on byte tokens, written out in plain
PyTorch (torch 1.13 has no RMSNorm module and no scaled_dot_product_attention).

    embedding 256 -> 128
    4 x block:  h = x + attn(rmsnorm(x));  y = h + down(silu(gate(rmsnorm(h))) * up(rmsnorm(h)))
                attn: qkv Linear(128, (8 + 2*2) * 16), rows q (8 heads) | k (2) | v (2); q and k
                rotated (RoPE, rotate-half, theta 10000, positions 0..T-1 of the window); query
                head h reads key/value head h // 4; causal softmax(q k^T / 4) v; proj Linear(128, 128)
    rmsnorm, then the output Linear(128, 256); with `tied` (tie_embeddings) logits = x @ table^T
    no biases; RMSNorm eps 1e-5

moe-char (`CharLlama(**MOE_CHAR)`): D 64, 4 heads with 2 key/value heads, 2 blocks whose MLP is a
mixture of experts: router Linear(64, 8) without bias, softmax, the top 2 probabilities
renormalised to sum 1 weighing SwiGLU experts of width 96, plus one shared SwiGLU expert on every
token (dropless: every token reaches its 2 experts).

`paralab_names(model)` maps each of the model's parameters to the name ParaLab's weights file
gives it (engine/io/weights.cpp), so that `paralab export --weights` loads as a state_dict.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

LLAMA_T, LLAMA_VOCAB, LLAMA_D, LLAMA_HEADS, LLAMA_KV_HEADS, LLAMA_FFN, LLAMA_LAYERS = 64, 256, 128, 8, 2, 384, 4
ROPE_THETA = 10000.0


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (torch.nn.RMSNorm of torch 2.4)."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):  # x is (..., D)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(t, hd, theta):
    """cos and sin (T, hd) of the rotate-half convention: pair (i, i + hd/2) turns by
    t * theta^(-2i/hd); the angles in float64, rounded to float32 as ParaLab rounds them."""
    i = torch.arange(hd // 2, dtype=torch.float64)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * theta ** (-2.0 * i / hd)[None, :]
    return torch.cat([angle.cos(), angle.cos()], -1).float(), torch.cat([angle.sin(), angle.sin()], -1).float()


def rotate(x, cos, sin):  # x is (B, H, T, hd); Hugging Face Llama's apply_rotary_pos_emb
    half = x.size(-1) // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class GroupedQueryAttention(nn.Module):
    def __init__(self, d, heads, kv_heads, theta=ROPE_THETA):
        super().__init__()
        self.heads, self.kv_heads, self.hd, self.theta = heads, kv_heads, d // heads, theta
        self.qkv = nn.Linear(d, (heads + 2 * kv_heads) * self.hd, bias=False)
        self.proj = nn.Linear(d, d, bias=False)

    def forward(self, x):  # x is (B, T, D); out is (B, T, D)
        B, T, D = x.size()
        H, KV, hd = self.heads, self.kv_heads, self.hd
        q, k, v = self.qkv(x).split([H * hd, KV * hd, KV * hd], dim=2)
        q = q.view(B, T, H, hd).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, KV, hd).transpose(1, 2)  # (B, KV, T, hd)
        v = v.view(B, T, KV, hd).transpose(1, 2)
        cos, sin = rope_tables(T, hd, self.theta)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k = k.repeat_interleave(H // KV, dim=1)  # query head h reads key/value head h // (H / KV)
        v = v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B, H, T, T)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, D))


MOE_CHAR = {"d": 64, "heads": 4, "kv_heads": 2, "layers": 2,
            "moe": {"experts": 8, "top_k": 2, "expert_ffn": 96, "shared_experts": 1}}


class SwiGLU(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):  # x is (..., D); out is (..., D)
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MixtureOfExperts(nn.Module):
    """engine/nn/moe.h, dropless: each expert on the rows of its tokens, weighted sum."""

    def __init__(self, d, experts, top_k, expert_ffn, shared_experts=0):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d, experts, bias=False)
        self.experts = nn.ModuleList([SwiGLU(d, expert_ffn) for _ in range(experts)])
        self.shared = nn.ModuleList([SwiGLU(d, expert_ffn) for _ in range(shared_experts)])

    def forward(self, x):  # x is (B, T, D); out is (B, T, D)
        flat = x.reshape(-1, x.size(-1))  # (N, D)
        probs = F.softmax(self.router(flat), dim=-1)  # (N, E)
        weight, choice = probs.topk(self.top_k, dim=-1)  # (N, k), most probable first
        weight = weight / weight.sum(-1, keepdim=True)
        y = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (choice == e).nonzero(as_tuple=True)
            if rows.numel():
                y.index_add_(0, rows, weight[rows, slot, None] * expert(flat[rows]))
        for shared in self.shared:
            y = y + shared(flat)
        return y.view_as(x)


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, moe=None):
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.attn = GroupedQueryAttention(d, heads, kv_heads)
        self.mlp_norm = RMSNorm(d)
        self.mlp = MixtureOfExperts(d, **moe) if moe else SwiGLU(d, ffn)

    def forward(self, x):  # x is (B, T, D); out is (B, T, D)
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class CharLlama(nn.Module):
    def __init__(self, vocab=LLAMA_VOCAB, d=LLAMA_D, heads=LLAMA_HEADS, kv_heads=LLAMA_KV_HEADS, ffn=LLAMA_FFN,
                 layers=LLAMA_LAYERS, tied=False, moe=None):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[LlamaBlock(d, heads, kv_heads, ffn, moe) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = None if tied else nn.Linear(d, vocab, bias=False)

    def forward(self, idx):  # idx is (B, T) byte ids; out is (B, T, vocab) logits
        x = self.norm(self.blocks(self.tok(idx)))
        return x @ self.tok.weight.t() if self.lm_head is None else self.lm_head(x)


def paralab_names(model):
    """{ParaLab's tensor name: the model's parameter}. Layer 0 the embedding, 1..L the blocks (a
    mixture of experts' router, experts.<e> and shared.<s>), L + 1 the final rmsnorm, L + 2 the
    output layer (tied: no tensor of its own)."""
    out = {"layers.0.weight": model.tok.weight}
    for b, block in enumerate(model.blocks):
        p = f"layers.{1 + b}."
        out[p + "layers.0.layers.0.weight"] = block.attn_norm.weight
        out[p + "layers.0.layers.1.qkv.weight"] = block.attn.qkv.weight
        out[p + "layers.0.layers.1.proj.weight"] = block.attn.proj.weight
        out[p + "layers.1.layers.0.weight"] = block.mlp_norm.weight
        mlp = p + "layers.1.layers.1."
        if isinstance(block.mlp, MixtureOfExperts):
            out[mlp + "router.weight"] = block.mlp.router.weight
            parts = [(f"experts.{e}.", m) for e, m in enumerate(block.mlp.experts)]
            parts += [(f"shared.{k}.", m) for k, m in enumerate(block.mlp.shared)]
        else:
            parts = [("", block.mlp)]
        for name, m in parts:
            for linear in ("gate", "up", "down"):
                out[mlp + name + linear + ".weight"] = getattr(m, linear).weight
    out[f"layers.{1 + len(model.blocks)}.weight"] = model.norm.weight
    if model.lm_head is not None:
        out[f"layers.{2 + len(model.blocks)}.weight"] = model.lm_head.weight
    return out
