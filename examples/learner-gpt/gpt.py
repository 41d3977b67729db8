"""A GPT written as the from-scratch lessons teach it, with the KV cache their
follow-up lesson adds: learned absolute positions, multi-head attention that
asserts d_out % num_heads == 0, LayerNorm with a scale and a shift, a
feed-forward of Linear(E, 4E) -> GELU -> Linear(4E, E), and per attention a
cache of K and V with a position pointer and a reset. Nothing here knows
kvcheck: engine.py serves it through the Python helper.

--bug NAME (engine.py) seeds one of the lesson's classic mistakes:
  positions_restart   the embedding's positions restart at 0 on every call
  mask_from_zero      the causal mask treats a cached call's queries as
                      positions 0..n-1 (wrong for a chunk after a prefix)
  reset_keeps_pos     reset_kv_cache() forgets the model's position pointer
"""
import math

import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, emb_dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                    nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))

    def forward(self, x):
        return self.layers(x)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, num_heads, qkv_bias=False, bug=None):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out, self.num_heads, self.head_dim = d_out, num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.bug = bug
        self.reset_cache()

    def reset_cache(self):
        self.cache_k, self.cache_v = None, None  # [b][heads][T][head_dim]
        self.ptr_current_pos = 0

    def forward(self, x, use_cache=False):
        b, num_tokens, _ = x.shape
        split = lambda t: t.view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries, keys, values = split(self.W_query(x)), split(self.W_key(x)), split(self.W_value(x))
        if use_cache:
            if self.cache_k is None:
                self.cache_k, self.cache_v = keys, values
            else:
                self.cache_k = torch.cat([self.cache_k, keys], dim=2)
                self.cache_v = torch.cat([self.cache_v, values], dim=2)
            keys, values = self.cache_k, self.cache_v
        first = self.ptr_current_pos if use_cache and self.bug != "mask_from_zero" else 0
        if use_cache:
            self.ptr_current_pos += num_tokens
        q_positions = torch.arange(first, first + num_tokens)
        k_positions = torch.arange(keys.shape[2])
        mask = q_positions[:, None] < k_positions[None, :]  # a query sees keys up to itself
        scores = (queries @ keys.transpose(2, 3)).masked_fill(mask, float("-inf"))
        weights = torch.softmax(scores / self.head_dim ** 0.5, dim=-1)
        context = (weights @ values).transpose(1, 2).reshape(b, num_tokens, self.d_out)
        return self.out_proj(context)


class TransformerBlock(nn.Module):
    def __init__(self, cfg, bug=None):
        super().__init__()
        self.att = MultiHeadAttention(cfg["emb_dim"], cfg["emb_dim"], cfg["n_heads"],
                                      cfg["qkv_bias"], bug)
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"], cfg["eps"])
        self.norm2 = LayerNorm(cfg["emb_dim"], cfg["eps"])

    def forward(self, x, use_cache=False):
        x = x + self.att(self.norm1(x), use_cache=use_cache)
        return x + self.ff(self.norm2(x))


class GPTModel(nn.Module):
    def __init__(self, cfg, bug=None):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.trf_blocks = nn.ModuleList([TransformerBlock(cfg, bug) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"], cfg["eps"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)
        self.bug = bug
        self.current_pos = 0

    def forward(self, in_idx, use_cache=False):
        _, num_tokens = in_idx.shape
        first = self.current_pos if use_cache and self.bug != "positions_restart" else 0
        if use_cache:
            self.current_pos += num_tokens
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(first, first + num_tokens))
        for block in self.trf_blocks:
            x = block(x, use_cache=use_cache)
        return self.out_head(self.final_norm(x))

    def reset_kv_cache(self):
        for block in self.trf_blocks:
            block.att.reset_cache()
        if self.bug != "reset_keeps_pos":
            self.current_pos = 0
