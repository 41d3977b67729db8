#!/usr/bin/python3
"""Hugging Face checkpoint folders written by PyTorch, for testing `--model`.

Builds small GPT-2 and Llama state dicts with torch, in the layouts real
checkpoints have (tied embeddings without lm_head.weight, names without the
transformer. prefix, GPT-2's attn.bias/attn.masked_bias buffers, BF16 and F16
storage, GQA), saves each as config.json + model.safetensors with a minimal
safetensors writer (the safetensors package is not required), and writes the
logits tools/reference_torch.py computes on them in float64 as
NAME.logits.json. It also writes folders that the loader must refuse, each
one change away from a good one (bad_*).

  /usr/bin/python3 tools/hf_checkpoint_torch.py --out DIR
"""

import argparse
import copy
import json
import os
import shutil
import struct
import sys

# Without PyTorch (Debian's python3-torch) there is nothing to write: exit 77,
# which ctest reports as skipped, and leave a marker so that the tests that
# read the folders skip too instead of failing on missing files.
SKIP = 77
try:
    import torch
except ImportError as e:
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv[:-1] else None
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "TORCH_MISSING"), "w") as f:
            f.write(f"{e}\n")
    print(f"hf_checkpoint_torch: PyTorch is not installed ({e}); install python3-torch. "
          "Skipping.")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_torch  # noqa: E402  (the independent float64 forward pass)

TOKENS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4]

DTYPE_NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
               torch.uint8: "U8", torch.bool: "BOOL"}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save_safetensors(path, tensors):
    """name -> tensor as a safetensors file, tensors in name order."""
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_folder(folder, config, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_safetensors(os.path.join(folder, "model.safetensors"), tensors)


def rand(gen, *shape, scale=1.0, offset=0.0):
    return torch.randn(*shape, generator=gen) * scale + offset


# ------------------------------------------------------------------ models

def gpt2_model(gen):
    """GPT2LMHeadModel's state dict as the hub's old gpt2 files hold it:
    no transformer. prefix, tied head (no lm_head.weight), U8 causal-mask
    buffers and masked_bias."""
    E, L, H, V, P = 16, 2, 4, 50, 32
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
              "n_positions": P, "n_ctx": P, "n_embd": E, "n_layer": L, "n_head": H,
              "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.1,
              "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5,
              "initializer_range": 0.02, "summary_type": "cls_index", "summary_use_proj": True,
              "summary_activation": None, "summary_proj_to_labels": True,
              "summary_first_dropout": 0.1, "scale_attn_weights": True, "use_cache": True,
              "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
              "bos_token_id": V - 1, "eos_token_id": V - 1, "transformers_version": "4.38.0"}
    F = 4 * E
    t = {"wte.weight": rand(gen, V, E), "wpe.weight": rand(gen, P, E),
         "ln_f.weight": rand(gen, E, scale=0.2, offset=1.0), "ln_f.bias": rand(gen, E, scale=0.1)}
    for layer in range(L):
        p = f"h.{layer}."
        t[p + "ln_1.weight"] = rand(gen, E, scale=0.2, offset=1.0)
        t[p + "ln_1.bias"] = rand(gen, E, scale=0.1)
        t[p + "attn.c_attn.weight"] = rand(gen, E, 3 * E, scale=E ** -0.5)   # Conv1D [in, out]
        t[p + "attn.c_attn.bias"] = rand(gen, 3 * E, scale=0.1)
        t[p + "attn.c_proj.weight"] = rand(gen, E, E, scale=E ** -0.5)
        t[p + "attn.c_proj.bias"] = rand(gen, E, scale=0.1)
        t[p + "ln_2.weight"] = rand(gen, E, scale=0.2, offset=1.0)
        t[p + "ln_2.bias"] = rand(gen, E, scale=0.1)
        t[p + "mlp.c_fc.weight"] = rand(gen, E, F, scale=E ** -0.5)
        t[p + "mlp.c_fc.bias"] = rand(gen, F, scale=0.1)
        t[p + "mlp.c_proj.weight"] = rand(gen, F, E, scale=F ** -0.5)
        t[p + "mlp.c_proj.bias"] = rand(gen, E, scale=0.1)
        t[p + "attn.bias"] = torch.tril(torch.ones(P, P, dtype=torch.uint8)).view(1, 1, P, P)
        t[p + "attn.masked_bias"] = torch.tensor(-1e4)
    kv = {"family": "gpt2", "n_layers": L, "d_model": E, "n_heads": H, "n_kv_heads": H,
          "head_dim": E // H, "d_ff": F, "vocab": V, "max_pos": P, "rope_theta": 10000.0,
          "norm_eps": 1e-5, "qkv_bias": True}
    full = {"transformer." + k: v for k, v in t.items()
            if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    full["lm_head.weight"] = full["transformer.wte.weight"]
    return config, t, kv, full


def llama_model(gen, dtype, tied):
    """LlamaForCausalLM's state dict with model. prefixes, GQA (8 query heads
    over 2 KV heads), head_dim 6 (q width 48 != hidden 32), rope_theta 500000."""
    E, L, H, KVH, D, F, V, P = 32, 2, 8, 2, 6, 40, 60, 64
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": V,
              "hidden_size": E, "intermediate_size": F, "num_hidden_layers": L,
              "num_attention_heads": H, "num_key_value_heads": KVH, "head_dim": D,
              "hidden_act": "silu", "max_position_embeddings": P, "initializer_range": 0.02,
              "rms_norm_eps": 1e-6, "use_cache": True, "pad_token_id": None, "bos_token_id": 1,
              "eos_token_id": 2, "pretraining_tp": 1, "tie_word_embeddings": tied,
              "rope_theta": 500000.0, "rope_scaling": None, "attention_bias": False,
              "attention_dropout": 0.0, "mlp_bias": False, "torch_dtype": "bfloat16",
              "transformers_version": "4.44.0"}
    t = {"model.embed_tokens.weight": rand(gen, V, E),
         "model.norm.weight": rand(gen, E, scale=0.2, offset=1.0)}
    if not tied:
        t["lm_head.weight"] = rand(gen, V, E, scale=E ** -0.5)
    for layer in range(L):
        p = f"model.layers.{layer}."
        t[p + "input_layernorm.weight"] = rand(gen, E, scale=0.2, offset=1.0)
        t[p + "self_attn.q_proj.weight"] = rand(gen, H * D, E, scale=E ** -0.5)
        t[p + "self_attn.k_proj.weight"] = rand(gen, KVH * D, E, scale=E ** -0.5)
        t[p + "self_attn.v_proj.weight"] = rand(gen, KVH * D, E, scale=E ** -0.5)
        t[p + "self_attn.o_proj.weight"] = rand(gen, E, H * D, scale=(H * D) ** -0.5)
        t[p + "post_attention_layernorm.weight"] = rand(gen, E, scale=0.2, offset=1.0)
        t[p + "mlp.gate_proj.weight"] = rand(gen, F, E, scale=E ** -0.5)
        t[p + "mlp.up_proj.weight"] = rand(gen, F, E, scale=E ** -0.5)
        t[p + "mlp.down_proj.weight"] = rand(gen, E, F, scale=F ** -0.5)
    t = {k: v.to(dtype) for k, v in t.items()}
    if tied:
        # Older Llama checkpoints carry RoPE's frequencies as a float32 buffer.
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, D, 2).float() / D))
        for layer in range(L):
            t[f"model.layers.{layer}.self_attn.rotary_emb.inv_freq"] = inv_freq
    kv = {"family": "llama", "n_layers": L, "d_model": E, "n_heads": H, "n_kv_heads": KVH,
          "head_dim": D, "d_ff": F, "vocab": V, "max_pos": P, "rope_theta": 500000.0,
          "norm_eps": 1e-6, "qkv_bias": False}
    full = {k: v for k, v in t.items() if not k.endswith("inv_freq")}
    if tied:
        full["lm_head.weight"] = full["model.embed_tokens.weight"]
    return config, t, kv, full


def reference_logits(kv, full):
    """tools/reference_torch.py's float64 forward pass on the stored values."""
    weights = {name: w.to(torch.float64) for name, w in full.items()}
    tokens = torch.tensor(TOKENS, dtype=torch.long)
    with torch.no_grad():
        if kv["family"] == "gpt2":
            logits = reference_torch.gpt2_logits(kv, weights, tokens)
        else:
            logits = reference_torch.llama_logits(kv, weights, tokens)
    return {"config": kv, "tokens": TOKENS, "logits": logits.tolist()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the checkpoints into")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(20261201)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)

    good = {"gpt2": gpt2_model(gen),
            "llama": llama_model(gen, torch.bfloat16, tied=False),
            "llama_tied": llama_model(gen, torch.float16, tied=True)}
    # What save_pretrained writes for GPT2LMHeadModel: prefixed names, no
    # buffers, and the tied head left out.
    config, tensors, kv, full = good["gpt2"]
    good["gpt2_prefixed"] = (config, {k: v for k, v in full.items() if k != "lm_head.weight"},
                             kv, full)
    for name, (config, tensors, kv, full) in good.items():
        write_folder(os.path.join(args.out, name), config, tensors)
        with open(os.path.join(args.out, name + ".logits.json"), "w") as f:
            json.dump(reference_logits(kv, full), f)

    # The Llama again, in two shards with the index save_pretrained writes for
    # large models.
    config, tensors, kv, full = good["llama"]
    folder = os.path.join(args.out, "llama_sharded")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, shard_names in shards.items():
        save_safetensors(os.path.join(folder, shard), {n: tensors[n] for n in shard_names})
        weight_map.update({n: shard for n in shard_names})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    shutil.copy(os.path.join(args.out, "llama.logits.json"),
                os.path.join(args.out, "llama_sharded.logits.json"))

    def bad(name, base, edit_config=None, edit_tensors=None):
        config, tensors = copy.deepcopy(good[base][0]), dict(good[base][1])
        if edit_config:
            edit_config(config)
        if edit_tensors:
            edit_tensors(tensors)
        write_folder(os.path.join(args.out, "bad_" + name), config, tensors)

    bad("unknown_tensor", "gpt2",
        edit_tensors=lambda t: t.update({"h.1.attn.rotary.weight": torch.zeros(4)}))
    bad("missing_tensor", "llama",
        edit_tensors=lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    bad("shape", "gpt2", edit_tensors=lambda t: t.update({"wpe.weight": torch.zeros(31, 16)}))
    bad("rope_scaling", "llama",
        edit_config=lambda c: c.update({"rope_scaling": {"type": "linear", "factor": 2.0}}))
    bad("attention_bias", "llama", edit_config=lambda c: c.update({"attention_bias": True}))
    bad("activation", "gpt2", edit_config=lambda c: c.update({"activation_function": "gelu"}))
    bad("untied_without_head", "llama_tied",
        edit_config=lambda c: c.update({"tie_word_embeddings": False}))
    bad("unknown_field", "llama", edit_config=lambda c: c.update({"logit_scale": 0.5}))
    bad("inv_freq", "llama_tied", edit_config=lambda c: c.update({"rope_theta": 10000.0}))
    bad("tied_head_differs", "llama",
        edit_config=lambda c: c.update({"tie_word_embeddings": True}))
    print(f"{args.out}: {', '.join(sorted(os.listdir(args.out)))}")


if __name__ == "__main__":
    main()
