#!/usr/bin/python3
"""PyTorch reference of resources/examples/llama-char.paralab.json (docs/experiment-format.md,
"Today's models"): Llama's block on byte tokens, written out in plain PyTorch (torch 1.13 has no
RMSNorm module and no scaled_dot_product_attention).

    embedding 256 -> 128
    4 x block:  h = x + attn(rmsnorm(x));  y = h + down(silu(gate(rmsnorm(h))) * up(rmsnorm(h)))
                attn: qkv Linear(128, (8 + 2*2) * 16), rows q (8 heads) | k (2) | v (2); q and k
                rotated (RoPE, rotate-half, theta 10000, positions 0..T-1 of the window); query
                head h reads key/value head h // 4; causal softmax(q k^T / 4) v; proj Linear(128, 128)
    rmsnorm, then the output Linear(128, 256); with `tied` (tie_embeddings) logits = x @ table^T
    no biases; RMSNorm eps 1e-5

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


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn):
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.attn = GroupedQueryAttention(d, heads, kv_heads)
        self.mlp_norm = RMSNorm(d)
        self.gate = nn.Linear(d, ffn, bias=False)
        self.up = nn.Linear(d, ffn, bias=False)
        self.down = nn.Linear(ffn, d, bias=False)

    def forward(self, x):  # x is (B, T, D); out is (B, T, D)
        x = x + self.attn(self.attn_norm(x))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class CharLlama(nn.Module):
    def __init__(self, vocab=LLAMA_VOCAB, d=LLAMA_D, heads=LLAMA_HEADS, kv_heads=LLAMA_KV_HEADS, ffn=LLAMA_FFN,
                 layers=LLAMA_LAYERS, tied=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.blocks = nn.Sequential(*[LlamaBlock(d, heads, kv_heads, ffn) for _ in range(layers)])
        self.norm = RMSNorm(d)
        self.lm_head = None if tied else nn.Linear(d, vocab, bias=False)

    def forward(self, idx):  # idx is (B, T) byte ids; out is (B, T, vocab) logits
        x = self.norm(self.blocks(self.tok(idx)))
        return x @ self.tok.weight.t() if self.lm_head is None else self.lm_head(x)


def paralab_names(model):
    """{ParaLab's tensor name: the model's parameter}. Layer 0 the embedding, 1..L the blocks,
    L + 1 the final rmsnorm, L + 2 the output layer (tied: no tensor of its own)."""
    out = {"layers.0.weight": model.tok.weight}
    for b, block in enumerate(model.blocks):
        p = f"layers.{1 + b}."
        out[p + "layers.0.layers.0.weight"] = block.attn_norm.weight
        out[p + "layers.0.layers.1.qkv.weight"] = block.attn.qkv.weight
        out[p + "layers.0.layers.1.proj.weight"] = block.attn.proj.weight
        out[p + "layers.1.layers.0.weight"] = block.mlp_norm.weight
        out[p + "layers.1.layers.1.gate.weight"] = block.gate.weight
        out[p + "layers.1.layers.1.up.weight"] = block.up.weight
        out[p + "layers.1.layers.1.down.weight"] = block.down.weight
    out[f"layers.{1 + len(model.blocks)}.weight"] = model.norm.weight
    if model.lm_head is not None:
        out[f"layers.{2 + len(model.blocks)}.weight"] = model.lm_head.weight
    return out
