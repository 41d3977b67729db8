"""The lesson's GPT (gpt.py), unchanged, served to kvcheck through the Python
helper (adapters/python/kvcheck_adapter.py, docs/ENGINE_PROTOCOL.md): what a
learner writes to check their KV cache.

    kvcheck check-adapter --backend exec:'python3 examples/learner-gpt/engine.py'
    kvcheck campaign --backend exec:'python3 examples/learner-gpt/engine.py'

The traits say what the lesson's model can load (learned positions, MHA
only, n_heads * head_dim = d_model, d_ff = 4 * d_model), so kvcheck draws
only such models. The model keeps one cache (per attention: K, V and a
position pointer, and the model's own pointer for the position embedding),
so each sequence's cache is swapped in for its step and out after it.
--bug NAME seeds one of the lesson's mistakes (gpt.py); --no-shape-limits
declares none of the shape limits, as a learner had to before kvcheck had
them: check-adapter then names each shape the model cannot load.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "adapters", "python"))
import kvcheck_adapter as kv  # noqa: E402
from gpt import GPTModel  # noqa: E402

BUGS = ("positions_restart", "mask_from_zero", "reset_keeps_pos")


def traits(bug, shape_limits=True):
    limits = {"kv_dtypes": ["f32"]}
    if shape_limits:  # what the lesson's GPT can load
        limits.update({"positions": ["learned"], "mha_only": True,
                       "query_width_is_d_model": ["gpt2"], "d_ff_is_4x_d_model": ["gpt2"]})
    return {"identity": {"name": "learner-gpt" + ("-" + bug if bug else ""), "version": "1"},
            "limits": limits,
            # torch picks its kernels by shape: the same tokens chunked or
            # batched otherwise agree within the derived bound, not in bits.
            "invariance": {k: "bounded" for k in ("chunking", "batch", "reset", "compaction",
                                                  "gqa_twin", "determinism", "sharing",
                                                  "rollback")}}


def build(loaded, bug):
    """The lesson's model with kvcheck's weights (Hugging Face GPT-2 names)."""
    c, t = loaded["config"], loaded["tensors"]
    E = c["d_model"]
    model = GPTModel({"vocab_size": c["vocab"], "context_length": c["max_pos"], "emb_dim": E,
                      "n_heads": c["n_heads"], "n_layers": c["n_layers"],
                      "qkv_bias": c["qkv_bias"], "eps": c["norm_eps"]}, bug)
    with torch.no_grad():
        model.tok_emb.weight.copy_(t["transformer.wte.weight"])
        model.pos_emb.weight.copy_(t["transformer.wpe.weight"])
        for i, block in enumerate(model.trf_blocks):
            p = "transformer.h.%d." % i
            att = block.att
            for linear, w in zip((att.W_query, att.W_key, att.W_value),
                                 t[p + "attn.c_attn.weight"].split(E, dim=1)):
                linear.weight.copy_(w.T)  # GPT-2's Conv1D stores [in][out]
            if c["qkv_bias"]:
                for linear, b in zip((att.W_query, att.W_key, att.W_value),
                                     t[p + "attn.c_attn.bias"].split(E)):
                    linear.bias.copy_(b)
            att.out_proj.weight.copy_(t[p + "attn.c_proj.weight"].T)
            att.out_proj.bias.copy_(t[p + "attn.c_proj.bias"])
            for norm, name in ((block.norm1, "ln_1"), (block.norm2, "ln_2")):
                norm.scale.copy_(t[p + name + ".weight"])
                norm.shift.copy_(t[p + name + ".bias"])
            up, down = block.ff.layers[0], block.ff.layers[2]
            up.weight.copy_(t[p + "mlp.c_fc.weight"].T)
            up.bias.copy_(t[p + "mlp.c_fc.bias"])
            down.weight.copy_(t[p + "mlp.c_proj.weight"].T)
            down.bias.copy_(t[p + "mlp.c_proj.bias"])
        model.final_norm.scale.copy_(t["transformer.ln_f.weight"])
        model.final_norm.shift.copy_(t["transformer.ln_f.bias"])
        model.out_head.weight.copy_(t["lm_head.weight"])
    return model.eval()


class Engine:
    """Sequences of one model; each one's cache is saved between its steps."""

    def __init__(self, model, capacity, max_rows):
        self.model, self.capacity, self.max_rows = model, capacity, max_rows
        self.saved, self.next = {}, 0  # sequence -> (per block (K, V, pointer), model pointer)

    def _save(self):
        blocks = [(b.att.cache_k, b.att.cache_v, b.att.ptr_current_pos)
                  for b in self.model.trf_blocks]
        return blocks, self.model.current_pos

    def _load(self, state):
        blocks, self.model.current_pos = state
        for b, (k, v, pointer) in zip(self.model.trf_blocks, blocks):
            b.att.cache_k, b.att.cache_v, b.att.ptr_current_pos = k, v, pointer

    def _state(self, sequence):
        if sequence not in self.saved:
            raise kv.EngineError("unknown_sequence", "no live sequence %r" % (sequence,))
        return self.saved[sequence]

    def start(self):
        if len(self.saved) >= self.max_rows:
            raise kv.EngineError("rows", "all %d rows are taken" % self.max_rows)
        self.model.reset_kv_cache()
        self.next += 1
        self.saved[self.next] = self._save()
        return self.next

    def step(self, entries):
        seen, V = set(), self.model.out_head.weight.shape[0]
        for sequence, tokens in entries:  # the whole batch before anything changes
            length = self._state(sequence)[1]
            if sequence in seen or not tokens:
                raise kv.EngineError("bad_batch", "sequence %r twice or empty" % (sequence,))
            seen.add(sequence)
            if any(not 0 <= t < V for t in tokens):
                raise kv.EngineError("bad_token", "a token outside [0, %d)" % V)
            if length + len(tokens) > self.capacity:
                raise kv.EngineError("capacity", "%d + %d tokens past capacity %d"
                                     % (length, len(tokens), self.capacity))
        out = []
        with torch.no_grad():
            for sequence, tokens in entries:
                self._load(self.saved[sequence])
                out.append(self.model(torch.tensor([tokens]), use_cache=True)[0])
                self.saved[sequence] = self._save()
        return torch.cat(out)  # [sum n][V]

    def finish(self, sequence):
        self._state(sequence)
        del self.saved[sequence]

    def reset(self):
        self.saved.clear()

    def length(self, sequence):
        return self._state(sequence)[1]

    def cache(self, sequence, layer):
        k, v, _ = self._state(sequence)[0][layer]
        if k is None:
            return b"", b""
        return k[0].transpose(0, 1), v[0].transpose(0, 1)  # [1][H][T][D] -> [T][H][D]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bug", choices=BUGS, help="seed one of the lesson's mistakes")
    parser.add_argument("--no-shape-limits", action="store_true",
                        help="declare no shape limits (check-adapter names what fails)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    kv.serve(traits(args.bug, not args.no_shape_limits),
             lambda loaded, capacity, max_rows, kv_dtype: Engine(build(loaded, args.bug),
                                                                  capacity, max_rows),
             lambda folder: kv.load_model(folder, prefer="torch"))


if __name__ == "__main__":
    main()
