// AdapterCheck's sessions of the core calls and of the operations
// (tools/adapter_check.h): a tiny model's load, create, starts, steps,
// lengths and cache, the refusals engine/engine.h owes, finish and reset
// with the rows they free; fork and truncate, erase and shift each on an
// engine of their own.
#include <algorithm>
#include <cstring>

#include "oracle/oracle.h"
#include "properties/tolerance.h"
#include "tools/adapter_check.h"

namespace kvcheck::cli {

void AdapterCheck::model_session(const EngineTraits& traits, const Config& config) {
  const std::string m =
      std::string(family_name(config.family)) + (config.n_kv_heads < config.n_heads ? " gqa" : "");
  const Weights weights = init_weights(config, kAdapterWeightSeed);
  const OperationTraits& ops = traits.operations;
  // An engine that cannot take the model refuses it at load or create: the
  // shape is then the traits' problem (a limit they lack), not the protocol's.
  const Shape shape{m, config};
  const auto model =
      make(m + ": load", {{"op", "load"}, {"path", folders_.folder(config, weights).path}}, "model",
           &shape);
  if (!model) return;
  ok(m + ": load");
  const auto engine = create(m + ": create", *model, &shape);
  if (!engine) return;
  ok(m + ": create");
  const int V = config.vocab;
  auto tok = [V](int i) { return int32_t((i * 7 + 3) % V); };
  std::vector<int32_t> a = {tok(1), tok(2), tok(3)}, b = {tok(4), tok(5)};
  const auto s1 = start(m + ": start", *engine), s2 = start(m + ": start", *engine);
  if (!s1 || !s2) return;
  if (*s1 == *s2) violation(m + ": start gave sequence " + std::to_string(*s1) + " twice");
  if (ops.multi_sequence_step) {
    step(m + ": step (two sequences, 3 + 2 tokens)", config, weights, *engine,
         {{*s1, &a, 3}, {*s2, &b, 2}});
  } else {
    step(m + ": step (3 tokens)", config, weights, *engine, {{*s1, &a, 3}});
    step(m + ": step (2 tokens)", config, weights, *engine, {{*s2, &b, 2}});
  }
  a.push_back(tok(6));
  step(m + ": step (decode 1 token)", config, weights, *engine, {{*s1, &a, 1}});
  length(m + ": length", *engine, *s1, 4);
  length(m + ": length", *engine, *s2, 2);
  if (ops.cache_snapshot) cache(m + ": cache", config, weights, *engine, *s1, a);
  refusals(m, ops, V, *engine, *s1, *s2);
  reuse_checks(m, ops, config, weights, *engine, *s1, *s2);
  if (call_ok(m + ": destroy", {{"op", "destroy"}, {"engine", *engine}})) ok(m + ": destroy");
  if (ops.fork || ops.truncate) operations_session(m, ops, config, weights, *model);
  if ((ops.erase || ops.shift) && config.family == Family::kLlama)
    context_shift_session(m, ops, config, weights, *model);
  if (call_ok(m + ": unload", {{"op", "unload"}, {"model", *model}})) ok(m + ": unload");
}

// The refusals engine/engine.h owes on a live engine: a step past capacity
// (where declared; the length unchanged), a token outside the vocabulary, an
// unknown sequence, a start with every row taken.
void AdapterCheck::refusals(const std::string& m, const OperationTraits& ops, int V, int64_t engine,
                            int64_t s1, int64_t s2) {
  auto tok = [V](int i) { return int32_t((i * 7 + 3) % V); };
  const int64_t unknown = std::max(s1, s2) + 1000;
  if (ops.capacity_refusal) {
    expect_refusal(
        m + ": step past capacity",
        {{"op", "step"},
         {"engine", engine},
         {"entries",
          {{{"sequence", s1}, {"tokens", std::vector<int32_t>(kAdapterCapacity - 3, tok(7))}}}}},
        "capacity", {1, size_t(kAdapterCapacity) * size_t(V) * 4});
    length(m + ": length after the refusal", engine, s1, 4);
  }
  expect_refusal(
      m + ": step with token " + std::to_string(V),
      {{"op", "step"}, {"engine", engine}, {"entries", {{{"sequence", s1}, {"tokens", {V}}}}}},
      "bad_token", {1, size_t(V) * 4});
  expect_refusal(m + ": length of an unknown sequence",
                 {{"op", "length"}, {"engine", engine}, {"sequence", unknown}}, "unknown_sequence");
  json full = {{"op", "start"}, {"engine", engine}};
  if (version_ >= 2) full["sequence"] = ++next_id_;
  expect_refusal(m + ": start with every row taken", full, "rows");
}

// A row freed by finish, and every row after reset, reused: the old cache
// must not leak into the new sequence (each where declared).
void AdapterCheck::reuse_checks(const std::string& m, const OperationTraits& ops,
                                const Config& config, const Weights& weights, int64_t engine,
                                int64_t s1, int64_t s2) {
  const int V = config.vocab;
  auto tok = [V](int i) { return int32_t((i * 7 + 3) % V); };
  if (ops.finish) {
    if (call_ok(m + ": finish", {{"op", "finish"}, {"engine", engine}, {"sequence", s2}}))
      ok(m + ": finish");
    expect_refusal(m + ": length of a finished sequence",
                   {{"op", "length"}, {"engine", engine}, {"sequence", s2}}, "unknown_sequence");
    // The freed row is reused: its old cache must not leak into the new sequence.
    std::vector<int32_t> c = {tok(8), tok(9), tok(10)};
    if (const auto s3 = start(m + ": start in the freed row", engine)) {
      step(m + ": step in the reused row", config, weights, engine, {{*s3, &c, 3}});
      length(m + ": length in the reused row", engine, *s3, 3);
    }
  }
  if (ops.reset) {
    if (call_ok(m + ": reset", {{"op", "reset"}, {"engine", engine}})) ok(m + ": reset");
    expect_refusal(m + ": length after reset",
                   {{"op", "length"}, {"engine", engine}, {"sequence", s1}}, "unknown_sequence");
    std::vector<int32_t> d = {tok(11), tok(12)};
    if (const auto s4 = start(m + ": start after reset", engine)) {
      step(m + ": step after reset", config, weights, engine, {{*s4, &d, 2}});
      length(m + ": length after reset", engine, *s4, 2);
    }
  }
}

// fork and truncate (docs/OPERATIONS.md) on an engine of their own: a
// child's and a truncated sequence's next logits against the oracle on
// their content, lengths, and the refusals the operations owe.
void AdapterCheck::operations_session(const std::string& m, const OperationTraits& ops,
                                      const Config& config, const Weights& weights, int64_t model) {
  const auto engine = create(m + ": create (operations)", model);
  if (!engine) return;
  const int V = config.vocab;
  auto tok = [V](int i) { return int32_t((i * 5 + 1) % V); };
  std::vector<int32_t> p = {tok(1), tok(2), tok(3)};
  const auto parent = start(m + ": start (operations)", *engine);
  if (!parent) return;
  step(m + ": step (3 tokens)", config, weights, *engine, {{*parent, &p, 3}});
  const int64_t unknown = *parent + 1000;
  if (ops.fork) {
    const auto child =
        make(m + ": fork of 2 tokens",
             {{"op", "fork"}, {"engine", *engine}, {"parent", *parent}, {"n", 2}}, "sequence");
    if (child) {
      ok(m + ": fork of 2 tokens: sequence " + std::to_string(*child));
      length(m + ": length of the fork", *engine, *child, 2);
      std::vector<int32_t> c = {p[0], p[1], tok(4)};
      step(m + ": step of the fork", config, weights, *engine, {{*child, &c, 1}});
      json full = {{"op", "fork"}, {"engine", *engine}, {"parent", *parent}, {"n", 1}};
      if (version_ >= 2) full["sequence"] = ++next_id_;
      expect_refusal(m + ": fork with every row taken", full, "rows");
    }
    json bad = {{"op", "fork"}, {"engine", *engine}, {"parent", unknown}, {"n", 0}};
    if (version_ >= 2) bad["sequence"] = ++next_id_;
    expect_refusal(m + ": fork of an unknown sequence", bad, "unknown_sequence");
  }
  if (ops.truncate) {
    if (call_ok(m + ": truncate 1 token",
                {{"op", "truncate"}, {"engine", *engine}, {"sequence", *parent}, {"n", 1}}))
      ok(m + ": truncate 1 token");
    length(m + ": length after truncate", *engine, *parent, 2);
    p.back() = tok(5);  // the forgotten token's position, fed anew
    step(m + ": step after truncate", config, weights, *engine, {{*parent, &p, 1}});
    expect_refusal(m + ": truncate of more than the length",
                   {{"op", "truncate"}, {"engine", *engine}, {"sequence", *parent}, {"n", 4}},
                   "bad_batch");
    length(m + ": length after the refusal", *engine, *parent, 3);
    expect_refusal(m + ": truncate of an unknown sequence",
                   {{"op", "truncate"}, {"engine", *engine}, {"sequence", unknown}, {"n", 0}},
                   "unknown_sequence");
  }
  if (call_ok(m + ": destroy (operations)", {{"op", "destroy"}, {"engine", *engine}}))
    ok(m + ": destroy (operations)");
}

// erase and shift (docs/OPERATIONS.md, "Erase and shift"; llama only) on
// an engine of their own: 4 tokens fed, a context shift (erase position 1,
// shift the later cells down by 1; the one declared alone: erase, or shift
// every cell up by 2), the length, a new token's logits and every layer's
// cache (K/V, and the positions where the reply lists them) against
// oracle::replay of that history, then the refusals they owe.
void AdapterCheck::context_shift_session(const std::string& m, const OperationTraits& ops,
                                         const Config& config, const Weights& weights,
                                         int64_t model) {
  const auto engine = create(m + ": create (erase and shift)", model);
  if (!engine) return;
  const int V = config.vocab;
  auto tok = [V](int i) { return int32_t((i * 11 + 2) % V); };
  std::vector<int32_t> p = {tok(1), tok(2), tok(3), tok(4)};
  const auto s = start(m + ": start (erase and shift)", *engine);
  if (!s) return;
  step(m + ": step (4 tokens)", config, weights, *engine, {{*s, &p, 4}});
  std::vector<oracle::Event> history;
  for (const int32_t t : p) history.push_back(oracle::Event::feed(t));
  int cells = 4;
  if (ops.erase) {
    if (call_ok(m + ": erase position 1",
                {{"op", "erase"}, {"engine", *engine}, {"sequence", *s}, {"p0", 1}, {"p1", 2}}))
      ok(m + ": erase position 1");
    history.push_back(oracle::Event::erase(1, 2));
    cells = 3;
    length(m + ": length after erase", *engine, *s, cells);
  }
  if (ops.shift) {
    const int p0 = ops.erase ? 2 : 0, delta = ops.erase ? -1 : 2;
    const std::string what = m + ": shift [" + std::to_string(p0) + ", " +
                             std::to_string(config.max_pos) + ") by " + std::to_string(delta);
    if (call_ok(what, {{"op", "shift"},
                       {"engine", *engine},
                       {"sequence", *s},
                       {"p0", p0},
                       {"p1", config.max_pos},
                       {"delta", delta}}))
      ok(what);
    history.push_back(oracle::Event::shift(p0, config.max_pos, delta));
    length(m + ": length after shift", *engine, *s, cells);
  }
  const int32_t next = tok(5);
  history.push_back(oracle::Event::feed(next));
  ++cells;
  const oracle::CellOutput exact = oracle::replay(config, weights, history);
  const HistoryBounds bound = derive_history_bounds(config, weights, history, KvDtype::kF32);
  const std::string what = m + ": step after the context shift";
  const size_t bytes = size_t(V) * 4;
  if (const auto r = call_ok(what,
                             {{"op", "step"},
                              {"engine", *engine},
                              {"entries", {{{"sequence", *s}, {"tokens", {next}}}}}},
                             {4, 4 * bytes + 4096})) {
    if (r->payloads.size() != 1 || r->payloads[0].size() != bytes) {
      violation(what + ": logits must be one payload of 1 token x vocab " + std::to_string(V) +
                " x 4 = " + std::to_string(bytes) + " bytes");
    } else {
      std::vector<float> row(static_cast<size_t>(V));
      std::memcpy(row.data(), r->payloads[0].data(), bytes);
      const int feeds = int(exact.logits.size()) / V;
      compare_rows(what, V, exact.logits, bound.logits, feeds - 1, feeds, row.data(), "feeds");
    }
  }
  length(m + ": length after the context shift", *engine, *s, cells);
  if (ops.cache_snapshot) {
    const CachedKv want{exact.k, exact.v, bound.k, bound.v, exact.positions};
    for (int layer = 0; layer < config.n_layers; ++layer)
      cache_layer(m + ": cache after the context shift layer " + std::to_string(layer), config,
                  *engine, *s, layer, size_t(cells), want);
  }
  shift_refusals(m, ops, *engine, *s, cells, config.max_pos);
  if (call_ok(m + ": destroy (erase and shift)", {{"op", "destroy"}, {"engine", *engine}}))
    ok(m + ": destroy (erase and shift)");
}

// The refusals erase and shift owe: an unknown sequence and [2, 1) for
// erase, a shift below position 0; the length unchanged after each.
void AdapterCheck::shift_refusals(const std::string& m, const OperationTraits& ops, int64_t engine,
                                  int64_t s, int cells, int max_pos) {
  const int64_t unknown = s + 1000;
  if (ops.erase) {
    expect_refusal(
        m + ": erase of an unknown sequence",
        {{"op", "erase"}, {"engine", engine}, {"sequence", unknown}, {"p0", 0}, {"p1", 1}},
        "unknown_sequence");
    expect_refusal(m + ": erase [2, 1)",
                   {{"op", "erase"}, {"engine", engine}, {"sequence", s}, {"p0", 2}, {"p1", 1}},
                   "bad_batch");
    length(m + ": length after the refusal", engine, s, cells);
  }
  if (ops.shift) {
    expect_refusal(m + ": shift below position 0",
                   {{"op", "shift"},
                    {"engine", engine},
                    {"sequence", s},
                    {"p0", 0},
                    {"p1", max_pos},
                    {"delta", -max_pos}},
                   "bad_batch");
    length(m + ": length after the refusal", engine, s, cells);
  }
}

void AdapterCheck::op_unknown() {
  expect_refusal("an unknown op", {{"op", "kvcheck-no-such-op"}}, "input");
}

}  // namespace kvcheck::cli
