#!/usr/bin/python3
"""Independent reference for the kvcheck model: PyTorch, float64, whole matrices.

Reads a safetensors file written by kvcheck (kvcheck-export), checks that it
holds exactly the config it is told and exactly the tensors that config needs
under Hugging Face names, runs the model on a token sequence, and writes a
golden JSON file with the logits [T][V] at full precision.

Nothing here is shared with the C++ oracle: the file format is parsed by
hand (the safetensors package is not required) and the model is written with
torch ops over whole sequences (layer_norm, matmul, a causal mask,
repeat_interleave, gelu(approximate='tanh'), silu), not per-element loops.

Run with Debian's python3-torch (PyTorch 1.13):
  /usr/bin/python3 tools/reference_torch.py --model m.safetensors \
      --config '{"family": "llama", ...}' --seed 7 --tokens 3,1,4,1,5 --out golden.json
"""

import argparse
import json
import math
import random
import struct
import sys

import torch
import torch.nn.functional as F

CONFIG_FIELDS = {
    "family": str, "n_layers": int, "d_model": int, "n_heads": int, "n_kv_heads": int,
    "head_dim": int, "d_ff": int, "vocab": int, "max_pos": int, "rope_theta": float,
    "norm_eps": float, "qkv_bias": bool,
}


def fail(message):
    sys.exit("reference_torch: " + message)


# ---------------------------------------------------------------- file format

def read_safetensors(path):
    """Returns (metadata dict, {name: float32 tensor}) after checking the layout."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        fail(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(blob[8:8 + header_len].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = blob[8 + header_len:]
    if sys.byteorder != "little":
        fail("this script reads little-endian F32 by reinterpreting bytes; run it on a "
             "little-endian machine")

    tensors = {}
    spans = []
    for name, info in header.items():
        if info.get("dtype") != "F32":
            fail(f"{name}: dtype {info.get('dtype')}, kvcheck writes F32")
        shape = info["shape"]
        begin, end = info["data_offsets"]
        count = math.prod(shape)
        if end - begin != 4 * count:
            fail(f"{name}: {end - begin} bytes for shape {shape}")
        if not 0 <= begin <= end <= len(data):
            fail(f"{name}: data_offsets [{begin}, {end}] outside the {len(data)}-byte data section "
                 "(truncated file?)")
        spans.append((begin, end, name))
        raw = bytearray(data[begin:end])
        tensors[name] = torch.frombuffer(raw, dtype=torch.float32).reshape(shape).clone()
    # The data section must be exactly the tensors, back to back, no overlap.
    spans.sort()
    cursor = 0
    for begin, end, name in spans:
        if begin != cursor:
            fail(f"{name}: starts at {begin}, previous tensor ended at {cursor}")
        cursor = end
    if cursor != len(data):
        fail(f"data section holds {len(data)} bytes, tensors cover {cursor}")
    return metadata, tensors


def expected_shapes(c):
    """Every tensor a config's model has, by Hugging Face name."""
    E, F_, V, H, KVH, D = (c["d_model"], c["d_ff"], c["vocab"], c["n_heads"],
                           c["n_kv_heads"], c["head_dim"])
    shapes = {"lm_head.weight": [V, E]}
    if c["family"] == "gpt2":
        shapes["transformer.wte.weight"] = [V, E]
        shapes["transformer.wpe.weight"] = [c["max_pos"], E]
        for layer in range(c["n_layers"]):
            p = f"transformer.h.{layer}."
            shapes[p + "ln_1.weight"] = [E]
            shapes[p + "ln_1.bias"] = [E]
            shapes[p + "attn.c_attn.weight"] = [E, H * D + 2 * KVH * D]  # Conv1D [in, out]
            if c["qkv_bias"]:
                shapes[p + "attn.c_attn.bias"] = [H * D + 2 * KVH * D]
            shapes[p + "attn.c_proj.weight"] = [H * D, E]
            shapes[p + "attn.c_proj.bias"] = [E]
            shapes[p + "ln_2.weight"] = [E]
            shapes[p + "ln_2.bias"] = [E]
            shapes[p + "mlp.c_fc.weight"] = [E, F_]
            shapes[p + "mlp.c_fc.bias"] = [F_]
            shapes[p + "mlp.c_proj.weight"] = [F_, E]
            shapes[p + "mlp.c_proj.bias"] = [E]
        shapes["transformer.ln_f.weight"] = [E]
        shapes["transformer.ln_f.bias"] = [E]
    else:
        shapes["model.embed_tokens.weight"] = [V, E]
        for layer in range(c["n_layers"]):
            p = f"model.layers.{layer}."
            shapes[p + "input_layernorm.weight"] = [E]
            shapes[p + "self_attn.q_proj.weight"] = [H * D, E]
            shapes[p + "self_attn.k_proj.weight"] = [KVH * D, E]
            shapes[p + "self_attn.v_proj.weight"] = [KVH * D, E]
            shapes[p + "self_attn.o_proj.weight"] = [E, H * D]
            shapes[p + "post_attention_layernorm.weight"] = [E]
            shapes[p + "mlp.gate_proj.weight"] = [F_, E]
            shapes[p + "mlp.up_proj.weight"] = [F_, E]
            shapes[p + "mlp.down_proj.weight"] = [E, F_]
        shapes["model.norm.weight"] = [E]
    return shapes


def check_config(found, told):
    if set(found) != set(CONFIG_FIELDS):
        fail(f"config fields in the file {sorted(found)} are not {sorted(CONFIG_FIELDS)}")
    for field, kind in CONFIG_FIELDS.items():
        a, b = found[field], told[field]
        # bool is an int in Python; compare types strictly where it matters.
        if kind is bool and not isinstance(a, bool):
            fail(f"config.{field} in the file is {a!r}, not a boolean")
        if kind is int and (isinstance(a, bool) or not isinstance(a, int)):
            fail(f"config.{field} in the file is {a!r}, not an integer")
        if a != b:
            fail(f"config.{field}: file says {a!r}, expected {b!r}")


def check_tensors(tensors, config):
    want = expected_shapes(config)
    missing = sorted(set(want) - set(tensors))
    extra = sorted(set(tensors) - set(want))
    if missing or extra:
        fail(f"tensor names differ from the config's model: missing {missing}, extra {extra}")
    for name, shape in want.items():
        if list(tensors[name].shape) != shape:
            fail(f"{name}: shape {list(tensors[name].shape)}, expected {shape}")


# ---------------------------------------------------------------------- model

def causal_attention(q, k, v, n_heads, n_kv_heads):
    """q [T, H, D], k and v [T, KVH, D] -> [T, H*D]."""
    T, _, D = q.shape
    group = n_heads // n_kv_heads
    q = q.transpose(0, 1)                                     # [H, T, D]
    k = k.transpose(0, 1).repeat_interleave(group, dim=0)     # [H, T, D]
    v = v.transpose(0, 1).repeat_interleave(group, dim=0)     # [H, T, D]
    scores = q @ k.transpose(1, 2) / math.sqrt(D)             # [H, T, T]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v                   # [H, T, D]
    return out.transpose(0, 1).reshape(T, n_heads * D)


def rope(x, theta):
    """Rotate-half RoPE at positions 0..T-1. x [T, heads, D] -> same."""
    T, _, D = x.shape
    inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)   # [D/2]
    angles = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [T, D/2]
    cos = torch.cat([angles.cos(), angles.cos()], dim=-1)[:, None, :]       # [T, 1, D]
    sin = torch.cat([angles.sin(), angles.sin()], dim=-1)[:, None, :]       # [T, 1, D]
    first, second = x[..., :D // 2], x[..., D // 2:]
    rotated = torch.cat([-second, first], dim=-1)                            # [T, heads, D]
    return x * cos + rotated * sin


def rms_norm(x, gain, eps):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * gain


def gpt2_logits(c, w, tokens):
    E, H, KVH, D, eps = c["d_model"], c["n_heads"], c["n_kv_heads"], c["head_dim"], c["norm_eps"]
    T = tokens.shape[0]
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:T]   # [T, E]
    for layer in range(c["n_layers"]):
        p = f"transformer.h.{layer}."
        h = F.layer_norm(x, (E,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = h @ w[p + "attn.c_attn.weight"]                                  # Conv1D: x @ W
        if c["qkv_bias"]:
            qkv = qkv + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split([H * D, KVH * D, KVH * D], dim=-1)
        att = causal_attention(q.reshape(T, H, D), k.reshape(T, KVH, D),
                               v.reshape(T, KVH, D), H, KVH)
        x = x + att @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (E,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        hidden = F.gelu(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + hidden @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (E,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    return x @ w["lm_head.weight"].T                                           # [T, V]


def llama_logits(c, w, tokens):
    H, KVH, D, eps, theta = (c["n_heads"], c["n_kv_heads"], c["head_dim"], c["norm_eps"],
                             c["rope_theta"])
    T = tokens.shape[0]
    x = w["model.embed_tokens.weight"][tokens]                                 # [T, E]
    for layer in range(c["n_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, D)          # nn.Linear: x @ W^T
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KVH, D)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KVH, D)
        att = causal_attention(rope(q, theta), rope(k, theta), v, H, KVH)
        x = x + att @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gated = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + gated @ w[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, w["model.norm.weight"], eps)
    return x @ w["lm_head.weight"].T                                           # [T, V]


# ----------------------------------------------------------------------- main

def golden_text(record):
    """JSON with the config indented, tokens on one line and one logits row per
    line; floats are written by repr, which reads back to the same double."""
    lines = ["{"]
    for key, value in record.items():
        if key == "logits":
            rows = ",\n".join("  [" + ", ".join(repr(x) for x in row) + "]" for row in value)
            lines.append(f' "logits": [\n{rows}\n ]')
        elif key == "config":
            body = json.dumps(value, indent=1).replace("\n", "\n ")
            lines.append(f' "config": {body},')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)},")
    return "\n".join(lines) + "\n}\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="safetensors file from kvcheck-export")
    parser.add_argument("--config", required=True,
                        help="the config JSON the file must hold (fields of config_to_json)")
    parser.add_argument("--seed", required=True, type=int, help="weight seed, recorded in the golden")
    tokens_given = parser.add_mutually_exclusive_group(required=True)
    tokens_given.add_argument("--tokens", help="comma-separated token ids")
    tokens_given.add_argument("--random-tokens", metavar="N,SEED",
                              help="N tokens drawn uniformly from the vocab with Python's "
                                   "random.Random(SEED); the golden records them")
    parser.add_argument("--name", default="", help="description recorded in the golden")
    parser.add_argument("--out", required=True, help="golden JSON file to write")
    args = parser.parse_args()

    told = json.loads(args.config)
    metadata, tensors = read_safetensors(args.model)
    if "kvcheck.config" not in metadata:
        fail(f"{args.model}: no __metadata__['kvcheck.config']")
    config = json.loads(metadata["kvcheck.config"])
    check_config(config, told)
    check_tensors(tensors, config)

    if args.tokens is not None:
        tokens = [int(t) for t in args.tokens.split(",")]
    else:
        count, token_seed = (int(part) for part in args.random_tokens.split(","))
        rng = random.Random(token_seed)
        tokens = [rng.randrange(config["vocab"]) for _ in range(count)]
    if not tokens or len(tokens) > config["max_pos"]:
        fail(f"{len(tokens)} tokens; need 1..max_pos={config['max_pos']}")
    if any(t < 0 or t >= config["vocab"] for t in tokens):
        fail(f"tokens {tokens} fall outside [0, {config['vocab']})")

    weights = {name: t.to(torch.float64) for name, t in tensors.items()}
    index = torch.tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        if config["family"] == "gpt2":
            logits = gpt2_logits(config, weights, index)
        else:
            logits = llama_logits(config, weights, index)
    if not torch.isfinite(logits).all():
        fail("non-finite logits")

    record = {
        "description": args.name,
        "reference": f"tools/reference_torch.py, torch {torch.__version__}, float64",
        "config": config,
        "weight_seed": args.seed,
        "tokens": tokens,
        "logits": logits.tolist(),
    }
    with open(args.out, "w") as f:
        f.write(golden_text(record))
    print(f"{args.out}: {len(tokens)} positions x {config['vocab']} logits, "
          f"max |logit| {logits.abs().max().item():.4g}")


if __name__ == "__main__":
    main()
