"""A tiny PyTorch transformer (GPT-2 and Llama families) with a KV cache
written the way a learner writes one, served to kvcheck over the engine
protocol (docs/ENGINE_PROTOCOL.md):

    kvcheck campaign --backend exec:'python3 adapters/torch/engine.py'

Each sequence owns a KVCache: per-layer K and V tensors [1, KVH, T, D] grown
with torch.cat along the sequence dimension, and a current-position pointer
that gives new tokens their absolute positions. GQA expands K/V with
repeat_interleave. A step feeds each entry through its own cache, so
sequences of different lengths share one step. Everything is float32; the
engine declares its invariances bounded (torch picks kernels by shape).

--dtype bf16 runs the model as PyTorch users do in bfloat16:
model.to(torch.bfloat16) (weights rounded once), every tensor and so every
operation's output in bf16, the RoPE tables cast to it (Hugging Face's
cos.to(x.dtype)), the K/V cache in bf16; torch accumulates matmuls and
reductions in float internally. It declares that arithmetic (activations
and weights bf16, docs/TOLERANCE.md) and kv_dtype bf16; logits widen to
float32 exactly.

--trap NAME seeds one of the lesson's bugs (the flag is part of the backend
string, so a case file names the trap and replay reproduces it):
  forget_reset       a reused row keeps its old cache (reset_kv_cache not called)
  repeat             K/V expanded with repeat instead of repeat_interleave
  restart_positions  positions restart at 0 for every chunk after the first
  noop_truncate      truncate changes nothing, so rejected tokens stay (mlx-lm #1109:
                     a trim of the cache that was a no-op)

fork copies the parent's first n positions into the child's row (a slice,
cloned); truncate narrows every layer's K/V to the new length and rewinds the
position pointer (docs/OPERATIONS.md).
"""

import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import kvcheck_adapter as kv  # noqa: E402

TRAPS = ("forget_reset", "repeat", "restart_positions", "noop_truncate")


class KVCache:
    """One sequence's cache: K/V per layer plus the next absolute position."""

    def __init__(self, n_layers):
        self.n_layers = n_layers
        self.reset_kv_cache()

    def reset_kv_cache(self):
        self.k = [None] * self.n_layers  # [1][KVH][T][D] per layer
        self.v = [None] * self.n_layers  # [1][KVH][T][D] per layer
        self.pos = 0

    def append(self, layer, k, v):
        """k, v: [1][KVH][n][D] -> the whole cache of the layer."""
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]

    def copy_prefix(self, other, n):
        """This cache becomes a copy of other's first n positions (fork)."""
        for layer in range(self.n_layers):
            k, v = other.k[layer], other.v[layer]
            keep = n > 0 and k is not None
            self.k[layer] = k[:, :, :n].clone() if keep else None
            self.v[layer] = v[:, :, :n].clone() if keep else None
        self.pos = n

    def drop_tail(self, n):
        """Forgets the last n positions (truncate)."""
        self.pos -= n
        for layer in range(self.n_layers):
            if self.k[layer] is not None:
                keep = self.pos > 0
                self.k[layer] = self.k[layer].narrow(2, 0, self.pos) if keep else None
                self.v[layer] = self.v[layer].narrow(2, 0, self.pos) if keep else None


class Model:
    """The weights under Hugging Face names, and the forward pass of one chunk."""

    def __init__(self, loaded, trap, dtype=torch.float32):
        self.c = loaded["config"]
        self.t = {name: t.to(dtype) for name, t in loaded["tensors"].items()}
        self.trap = trap
        c = self.c
        self.gpt2 = c["family"] == "gpt2"
        self.H, self.KVH, self.D = c["n_heads"], c["n_kv_heads"], c["head_dim"]
        if not self.gpt2:
            i = torch.arange(self.D // 2, dtype=torch.float64)
            self.inv_freq = c["rope_theta"] ** (-2.0 * i / self.D)  # [D/2]

    def w(self, name):
        return self.t[("transformer." if self.gpt2 else "model.") + name]

    def norm(self, x, prefix):
        eps = self.c["norm_eps"]
        if self.gpt2:
            return torch.nn.functional.layer_norm(x, x.shape[-1:], self.w(prefix + ".weight"),
                                                  self.w(prefix + ".bias"), eps)
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)  # each op rounds to x's dtype
        return x * rms * self.w(prefix + ".weight")

    def rope(self, x, positions):
        """x: [1][heads][n][D] rotated by absolute positions [n] (rotate-half)."""
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]  # [n][D/2]
        cos, sin = angles.cos().to(torch.float32), angles.sin().to(torch.float32)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # bf16: Hugging Face's cos.to(x.dtype)
        half = self.D // 2
        first, second = x[..., :half], x[..., half:]
        return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)

    def expand(self, kv):
        """[1][KVH][T][D] -> [1][H][T][D]: query head h reads KV head h // group."""
        group = self.H // self.KVH
        if self.trap == "repeat":
            return kv.repeat(1, group, 1, 1)
        return kv.repeat_interleave(group, dim=1)

    def attention(self, layer, h, cache, positions):
        n = h.shape[0]
        H, KVH, D = self.H, self.KVH, self.D
        if self.gpt2:
            p = "h.%d.attn." % layer
            qkv = h @ self.w(p + "c_attn.weight")  # [n][H*D + 2*KVH*D]
            if self.c["qkv_bias"]:
                qkv = qkv + self.w(p + "c_attn.bias")
            q, k, v = qkv.split([H * D, KVH * D, KVH * D], dim=-1)
        else:
            p = "layers.%d.self_attn." % layer
            q = h @ self.w(p + "q_proj.weight").T
            k = h @ self.w(p + "k_proj.weight").T
            v = h @ self.w(p + "v_proj.weight").T
        q = q.view(1, n, H, D).transpose(1, 2)  # [1][H][n][D]
        k = k.view(1, n, KVH, D).transpose(1, 2)  # [1][KVH][n][D]
        v = v.view(1, n, KVH, D).transpose(1, 2)
        if not self.gpt2:
            q, k = self.rope(q, positions), self.rope(k, positions)
        keys, values = cache.append(layer, k, v)  # [1][KVH][T][D]
        keys, values = self.expand(keys), self.expand(values)
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(D)  # [1][H][n][T]
        T = keys.shape[2]
        # Query i sits at cache slot T - n + i and sees slots up to it.
        mask = torch.arange(T)[None, :] > (T - n + torch.arange(n))[:, None]
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ values  # [1][H][n][D]
        out = out.transpose(1, 2).reshape(n, H * D)
        if self.gpt2:
            return out @ self.w(p + "c_proj.weight") + self.w(p + "c_proj.bias")
        return out @ self.w(p + "o_proj.weight").T

    def mlp(self, layer, h):
        if self.gpt2:
            p = "h.%d.mlp." % layer
            up = h @ self.w(p + "c_fc.weight") + self.w(p + "c_fc.bias")
            hidden = torch.nn.functional.gelu(up, approximate="tanh")
            return hidden @ self.w(p + "c_proj.weight") + self.w(p + "c_proj.bias")
        p = "layers.%d.mlp." % layer
        gate = h @ self.w(p + "gate_proj.weight").T
        up = h @ self.w(p + "up_proj.weight").T
        return (torch.nn.functional.silu(gate) * up) @ self.w(p + "down_proj.weight").T

    def forward(self, tokens, cache):
        """tokens [n] appended to cache -> logits [n][V]."""
        n = len(tokens)
        start = 0 if (self.trap == "restart_positions" and cache.pos > 0) else cache.pos
        positions = torch.arange(start, start + n)
        ids = torch.tensor(tokens, dtype=torch.long)
        if self.gpt2:
            x = self.w("wte.weight")[ids] + self.w("wpe.weight")[positions]
        else:
            x = self.w("embed_tokens.weight")[ids]
        for layer in range(self.c["n_layers"]):
            ln1, ln2 = ("h.%d.ln_1" % layer, "h.%d.ln_2" % layer) if self.gpt2 else (
                "layers.%d.input_layernorm" % layer, "layers.%d.post_attention_layernorm" % layer)
            x = x + self.attention(layer, self.norm(x, ln1), cache, positions)
            x = x + self.mlp(layer, self.norm(x, ln2))
        cache.pos += n
        x = self.norm(x, "ln_f" if self.gpt2 else "norm")
        return (x @ self.t["lm_head.weight"].T).to(torch.float32)


class Engine:
    """Rows of caches; a sequence holds a row from start to finish."""

    def __init__(self, model, capacity, max_rows):
        self.model, self.capacity = model, capacity
        self.rows = [KVCache(model.c["n_layers"]) for _ in range(max_rows)]
        self.row_of = {}  # sequence -> row
        self.next_sequence = 0

    def start(self):
        free = [r for r in range(len(self.rows)) if r not in self.row_of.values()]
        if not free:
            raise kv.EngineError("rows", "all %d rows are taken" % len(self.rows))
        if self.model.trap != "forget_reset":
            self.rows[free[0]].reset_kv_cache()
        self.next_sequence += 1
        self.row_of[self.next_sequence] = free[0]
        return self.next_sequence

    def cache_of(self, sequence):
        if sequence not in self.row_of:
            raise kv.EngineError("unknown_sequence", "no live sequence %r" % (sequence,))
        return self.rows[self.row_of[sequence]]

    def check(self, entries):
        """The whole batch before anything changes."""
        seen, V = set(), self.model.c["vocab"]
        for sequence, tokens in entries:
            cache = self.cache_of(sequence)
            if sequence in seen or not tokens:
                raise kv.EngineError("bad_batch", "sequence %r twice or empty" % (sequence,))
            seen.add(sequence)
            bad = [t for t in tokens if not 0 <= t < V]
            if bad:
                raise kv.EngineError("bad_token", "token %r outside [0, %d)" % (bad[0], V))
            if cache.pos + len(tokens) > self.capacity:
                raise kv.EngineError("capacity", "sequence %r: %d + %d tokens past capacity %d"
                                     % (sequence, cache.pos, len(tokens), self.capacity))

    def step(self, entries):
        self.check(entries)
        with torch.no_grad():
            out = [self.model.forward(tokens, self.cache_of(s)) for s, tokens in entries]
        return torch.cat(out, dim=0)  # [sum n][V]

    def fork(self, parent, n):
        """A new sequence whose cache is a copy of parent's first n tokens."""
        source = self.cache_of(parent)
        if not 0 <= n <= source.pos:
            raise kv.EngineError("bad_batch", "fork of %d tokens from a sequence of %d"
                                 % (n, source.pos))
        child = self.start()
        self.rows[self.row_of[child]].copy_prefix(source, n)
        return child

    def truncate(self, sequence, n):
        cache = self.cache_of(sequence)
        if not 0 <= n <= cache.pos:
            raise kv.EngineError("bad_batch", "truncate of %d tokens from a sequence of %d"
                                 % (n, cache.pos))
        if self.model.trap != "noop_truncate":
            cache.drop_tail(n)

    def finish(self, sequence):
        self.cache_of(sequence)
        del self.row_of[sequence]

    def reset(self):
        self.row_of.clear()
        if self.model.trap != "forget_reset":
            for cache in self.rows:
                cache.reset_kv_cache()

    def length(self, sequence):
        return self.cache_of(sequence).pos

    def cache(self, sequence, layer):
        cache = self.cache_of(sequence)
        if cache.k[layer] is None:
            return b"", b""
        # [1][KVH][T][D] -> [T][KVH][D], as the protocol sends it
        return cache.k[layer][0].transpose(0, 1), cache.v[layer][0].transpose(0, 1)


def traits(trap, dtype):
    name = "torch-learner" + ("-" + trap if trap else "") + ("-bf16" if dtype == "bf16" else "")
    bounded = "bounded"
    arithmetic = {"activations": "bf16", "weights": "bf16"} if dtype == "bf16" else {}
    return {
        "identity": {"name": name, "version": "1"},
        "operations": {"fork": True, "truncate": True},
        "limits": {"kv_dtypes": [dtype]},
        "arithmetic": arithmetic,
        "invariance": {k: bounded for k in
                       ("chunking", "batch", "reset", "compaction", "gqa_twin", "determinism",
                        "sharing", "rollback")},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trap", choices=TRAPS, help="seed one of the lesson's bugs")
    parser.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                        help="the model's dtype (bf16: model.to(torch.bfloat16))")
    args = parser.parse_args()
    torch.set_num_threads(1)

    def load(folder):
        return kv.load_model(folder, prefer="torch")

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32

    def make_engine(loaded, capacity, max_rows, kv_dtype):
        if kv_dtype != args.dtype:
            raise kv.EngineError("input", "kv_dtype %s (this engine stores %s)" % (kv_dtype, args.dtype))
        return Engine(Model(loaded, args.trap, dtype), capacity, max_rows)

    kv.serve(traits(args.trap, args.dtype), make_engine, load)


if __name__ == "__main__":
    main()
