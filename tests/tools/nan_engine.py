"""An engine behind the engine protocol whose logits are all one
non-finite value (NaN unless --value says inf or -inf): the same bits in
every run and every chunking, so that only a check of non-finite values
fails it (tests/backends/exec/exec_non_finite_test.cpp). It caches nothing and
declares no cache snapshot.

    python3 nan_engine.py ADAPTER_DIR [--value nan|inf|-inf]
"""
import argparse
import json
import struct
import sys


class Engine:
    def __init__(self, model, capacity, max_rows, kv_dtype, value):
        self.vocab, self.capacity, self.max_rows = model["config"]["vocab"], capacity, max_rows
        self.value = struct.pack("<f", value)
        self.lengths, self.next = {}, 0

    def start(self):
        if len(self.lengths) >= self.max_rows:
            raise kv.EngineError("rows", "all %d rows are taken" % self.max_rows)
        self.next += 1
        self.lengths[self.next] = 0
        return self.next

    def step(self, entries):
        for sequence, tokens in entries:
            self.lengths[sequence] += len(tokens)
        return self.value * (self.vocab * sum(len(tokens) for _, tokens in entries))

    def finish(self, sequence):
        del self.lengths[sequence]

    def reset(self):
        self.lengths.clear()

    def length(self, sequence):
        return self.lengths[sequence]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("adapter_dir")
    parser.add_argument("--value", default="nan", choices=["nan", "inf", "-inf"])
    args = parser.parse_args()
    global kv
    sys.path.insert(0, args.adapter_dir)
    import kvcheck_adapter as kv

    def load(folder):  # the logits need the vocabulary only, not the weights
        with open(folder + "/config.json") as f:
            return {"config": json.load(f)}

    traits = {"identity": {"name": "nan-engine", "version": "1"},
              "operations": {"cache_snapshot": False, "capacity_refusal": False}}
    kv.serve(traits=traits, load=load,
             make_engine=lambda model, capacity, max_rows, kv_dtype: Engine(
                 model, capacity, max_rows, kv_dtype, float(args.value)))


if __name__ == "__main__":
    main()
