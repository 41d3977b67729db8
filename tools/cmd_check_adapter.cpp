// `kvcheck check-adapter --backend exec:CMD`: every message of the engine
// protocol (docs/ENGINE_PROTOCOL.md) once, on tiny models whose answers the
// oracle knows, so that an adapter's author learns which side is wrong:
//  - a protocol violation is the adapter's: a frame or reply that does not
//    parse, a missing reply, a field of the wrong type, payloads whose shape
//    disagrees with the traits and the request, a refusal of the wrong kind,
//    an error on a well-formed request;
//  - a cache bug is the engine's: logits or cached K/V the oracle disagrees
//    with (beyond the derived bound), a wrong length, a refusal that should
//    have come and did not.
// Where the traits declare fork or truncate, they are checked too, on an
// engine of their own; so are erase and shift (a context shift, on the llama
// model) against oracle::replay of the history.
// Exit 0 when clean, 1 when anything was found, 2 on bad input.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/exec/exec.h"
#include "backends/exec/exec_child.h"
#include "backends/exec/exec_models.h"
#include "backends/exec/exec_reply.h"
#include "engine/traits_json.h"
#include "model/status.h"
#include "model/weights.h"
#include "oracle/oracle.h"
#include "properties/tolerance.h"
#include "tools/commands.h"

namespace kvcheck::cli {

namespace {

using nlohmann::json;

constexpr int kCapacity = 8;
constexpr int kMaxRows = 2;
constexpr uint64_t kWeightSeed = 12;

struct CheckAdapterOptions {
  std::string backend;
};

// The child failed in a way that ends the session (no reply, bad frame).
struct SessionOver {};

class AdapterCheck {
 public:
  AdapterCheck(const std::string& command, ChildWaits waits) : child_(command, waits) {}

  int run() {
    try {
      std::optional<EngineTraits> traits = hello();
      if (traits) {
        int models = 0;
        for (Config config : {llama_gqa(), gpt2_tiny()}) {
          config = fitted(config, traits->limits);
          const std::string refused = traits->refuses(config, KvDtype::kF32, kCapacity, kMaxRows);
          if (!refused.empty()) {
            std::printf("  skip %s: the traits refuse it (%s)\n", family_name(config.family),
                        refused.c_str());
            continue;
          }
          ++models;
          model_session(*traits, config);
        }
        if (models == 0) throw InputError("check-adapter: the traits accept neither tiny model");
        op_unknown();
      }
    } catch (const SessionOver&) {
      std::printf("  the remaining checks did not run: the child is gone\n");
    }
    std::printf("check-adapter: %d checks, %d protocol violations, %d cache bugs\n", checks_,
                violations_, bugs_);
    if (violations_ > 0)
      std::printf(
          "  protocol violations are the adapter's side: framing, replies, types, shapes "
          "(docs/ENGINE_PROTOCOL.md)\n");
    if (bugs_ > 0)
      std::printf(
          "  cache bugs are the engine's side: values or refusals the oracle and "
          "engine/engine.h disagree with\n");
    return violations_ + bugs_ > 0 ? 1 : 0;
  }

 private:
  // The tiny model with head_dim rounded up to the traits' multiple (ONNX
  // Runtime's rotary needs 16s, a q8_0 cache 32s), so that such an engine is
  // checked on a model it accepts rather than not at all.
  static Config fitted(Config c, const ShapeLimits& limits) {
    const int m = limits.head_dim_multiple;
    if (m > 1) c.head_dim = (c.head_dim + m - 1) / m * m;
    return c;
  }

  static Config llama_gqa() {
    Config c = llama_tiny();
    c.n_kv_heads = c.n_heads / 2;  // GQA: repeat vs repeat_interleave matters
    return c;
  }

  void ok(const std::string& what) {
    ++checks_;
    std::printf("  ok                  %s\n", what.c_str());
  }
  void violation(const std::string& what) {
    ++checks_, ++violations_;
    std::printf("  PROTOCOL VIOLATION  %s\n", what.c_str());
  }
  void bug(const std::string& what) {
    ++checks_, ++bugs_;
    std::printf("  CACHE BUG           %s\n", what.c_str());
  }

  // One request; a reply that does not parse or never comes ends the session.
  Reply call(const std::string& what, const json& request, wire::ReplyLimits limits = {}) {
    try {
      return child_.call(request, limits);
    } catch (const ChildFault& e) {
      violation(what + ": " + e.what());
      throw SessionOver{};
    }
  }

  // A reply that must succeed; an error reply is a violation (the request was
  // well formed) and nullopt.
  std::optional<Reply> call_ok(const std::string& what, const json& request,
                               wire::ReplyLimits limits = {}) {
    Reply r = call(what, request, limits);
    if (r.error) {
      violation(what + ": a well-formed request got error " + r.error->kind + ": " +
                r.error->message);
      return std::nullopt;
    }
    return r;
  }

  // An integer field, or a violation naming it.
  std::optional<int64_t> integer(const std::string& what, const Reply& r, const char* key) {
    const auto it = r.control.find(key);
    if (it == r.control.end() || !it->is_number_integer()) {
      violation(what + ": \"" + key + "\" must be an integer, got " +
                (it == r.control.end() ? std::string("nothing") : it->dump()));
      return std::nullopt;
    }
    return it->get<int64_t>();
  }

  // A request that must be refused with `kind`.
  void expect_refusal(const std::string& what, const json& request, const std::string& kind,
                      wire::ReplyLimits limits = {}) {
    const Reply r = call(what, request, limits);
    if (!r.error)
      bug(what + ": accepted; engine/engine.h refuses it with " + kind);
    else if (r.error->kind != kind)
      violation(what + ": refused with kind " + r.error->kind + ", the protocol's kind is " + kind +
                " (" + r.error->message + ")");
    else
      ok(what + ": refused with " + kind);
  }

  std::optional<EngineTraits> hello() {
    Reply r;
    try {
      r = child_.call({{"op", "hello"}, {"protocol", wire::kProtocolVersion}}, {});
    } catch (const ChildFault& e) {
      // The shell's 126 and 127: the command was not found or may not run,
      // which is bad input (exit 2), not the adapter breaking the protocol.
      if (child_.exit_code() == 126 || child_.exit_code() == 127)
        throw InputError(std::string("check-adapter: the command could not start: ") + e.what());
      violation(std::string("hello: ") + e.what());
      throw SessionOver{};
    }
    if (r.error) {
      violation("hello: error " + r.error->kind + ": " + r.error->message);
      return std::nullopt;
    }
    const auto version = integer("hello", r, "protocol");
    if (!version) return std::nullopt;
    if (*version < wire::kMinProtocolVersion || *version > wire::kProtocolVersion) {
      violation("hello: protocol " + std::to_string(*version) + ", this kvcheck speaks 1 and 2");
      return std::nullopt;
    }
    version_ = int(*version);
    const auto t = r.control.find("traits");
    if (t == r.control.end() || !t->is_object()) {
      violation("hello: \"traits\" must be an object");
      return std::nullopt;
    }
    Result<EngineTraits> traits = traits_from_json(*t);
    if (!traits.ok()) {
      violation("hello: traits: " + traits.error());
      return std::nullopt;
    }
    ok("hello: protocol " + std::to_string(version_) + ", traits of " +
       traits.value().identity.name + " " + traits.value().identity.version);
    return traits.value();
  }

  // The logits rows of `tokens_so_far[from, to)` against the oracle.
  void compare_logits(const std::string& what, const Config& config, const Weights& weights,
                      const std::vector<int32_t>& tokens, int from, const float* rows) {
    const oracle::Output exact = oracle::forward(config, weights, tokens);
    const ErrorBounds bound = derive_error_bounds(config, weights, tokens, KvDtype::kF32);
    compare_rows(what, config.vocab, exact.logits, bound.logits, from, int(tokens.size()), rows);
  }

  // Rows [from, to) of exact logits [rows][V] and their bounds against the
  // engine's, rows[0] being row `from`.
  void compare_rows(const std::string& what, int V, const std::vector<double>& exact,
                    const std::vector<double>& bound, int from, int to, const float* rows,
                    const char* unit = "positions") {
    int wrong = 0;
    std::string first;
    for (int t = from; t < to; ++t) {
      for (int i = 0; i < V; ++i) {
        const size_t at = size_t(t) * size_t(V) + size_t(i);
        const double got = rows[size_t(t - from) * size_t(V) + size_t(i)];
        if (!(std::fabs(got - exact[at]) <= bound[at])) {
          if (wrong++ == 0) {
            char text[200];
            std::snprintf(text, sizeof text,
                          "%.*s %d, vocabulary %d: engine %.6g, oracle %.6g, bound %.3g",
                          int(std::strlen(unit)) - 1, unit, t, i, got, exact[at], bound[at]);
            first = text;
          }
        }
      }
    }
    if (wrong > 0)
      bug(what + ": " + std::to_string(wrong) + " logits disagree with the oracle; first at " +
          first);
    else
      ok(what + ": logits of " + unit + " " + std::to_string(from) + ".." + std::to_string(to - 1) +
         " within the oracle's bound");
  }

  // One step; entries are (sequence, all its tokens so far, how many are new).
  struct Fed {
    int64_t sequence;
    const std::vector<int32_t>* tokens;
    int fresh;
  };
  void step(const std::string& what, const Config& config, const Weights& weights, int64_t engine,
            const std::vector<Fed>& fed) {
    json entries = json::array();
    size_t n = 0;
    for (const Fed& f : fed) {
      entries.push_back(
          {{"sequence", f.sequence},
           {"tokens", std::vector<int32_t>(f.tokens->end() - f.fresh, f.tokens->end())}});
      n += size_t(f.fresh);
    }
    const size_t bytes = n * size_t(config.vocab) * 4;
    // Loose limits: a wrong size is reported below, naming the shape.
    const auto r = call_ok(what, {{"op", "step"}, {"engine", engine}, {"entries", entries}},
                           {4, 4 * bytes + 4096});
    if (!r) return;
    if (r->payloads.size() != 1 || r->payloads[0].size() != bytes) {
      std::string got = std::to_string(r->payloads.size()) + " payloads";
      if (r->payloads.size() == 1) got = std::to_string(r->payloads[0].size()) + " bytes";
      violation(what + ": logits must be one payload of " + std::to_string(n) + " tokens x vocab " +
                std::to_string(config.vocab) + " x 4 = " + std::to_string(bytes) + " bytes, got " +
                got);
      return;
    }
    ok(what + ": one payload of [" + std::to_string(n) + "][" + std::to_string(config.vocab) +
       "] f32");
    std::vector<float> logits(n * size_t(config.vocab));
    std::memcpy(logits.data(), r->payloads[0].data(), bytes);
    size_t row = 0;
    for (const Fed& f : fed) {
      compare_logits(what + ", sequence " + std::to_string(f.sequence), config, weights, *f.tokens,
                     int(f.tokens->size()) - f.fresh, logits.data() + row * size_t(config.vocab));
      row += size_t(f.fresh);
    }
  }

  void length(const std::string& what, int64_t engine, int64_t sequence, int want) {
    const auto r = call_ok(what, {{"op", "length"}, {"engine", engine}, {"sequence", sequence}});
    if (!r) return;
    const auto n = integer(what, *r, "length");
    if (!n) return;
    if (*n != want)
      bug(what + ": length " + std::to_string(*n) + ", " + std::to_string(want) + " tokens fed");
    else
      ok(what + ": length " + std::to_string(want));
  }

  void cache(const std::string& what, const Config& config, const Weights& weights, int64_t engine,
             int64_t sequence, const std::vector<int32_t>& tokens) {
    const oracle::Output exact = oracle::forward(config, weights, tokens);
    const ErrorBounds bound = derive_error_bounds(config, weights, tokens, KvDtype::kF32);
    const CachedKv want{exact.k, exact.v, bound.k, bound.v, {}};
    for (int layer = 0; layer < config.n_layers; ++layer)
      cache_layer(what + " layer " + std::to_string(layer), config, engine, sequence, layer,
                  tokens.size(), want);
  }

  // What a layer's cache must hold: K and V [L][slots][KVH][D] with their
  // bounds, and the slots' positions (empty: slot i holds position i).
  struct CachedKv {
    const std::vector<double>&k, &v, &k_bound, &v_bound;
    std::vector<int32_t> positions;
  };

  // One layer's cache reply: its shape (a protocol matter), then its slot
  // count, listed positions and K/V against `want` (the engine's).
  void cache_layer(const std::string& at, const Config& config, int64_t engine, int64_t sequence,
                   int layer, size_t T, const CachedKv& want) {
    const size_t width = size_t(config.kv_width());
    const auto r =
        call_ok(at, {{"op", "cache"}, {"engine", engine}, {"sequence", sequence}, {"layer", layer}},
                {4, size_t(kCapacity) * width * 4 * 4 + 4096});
    if (!r) return;
    const auto n = integer(at, *r, "length");
    if (!n) return;
    const size_t bytes = size_t(std::max<int64_t>(*n, 0)) * width * 4;
    if (r->payloads.size() != 2 || r->payloads[0].size() != bytes ||
        r->payloads[1].size() != bytes) {
      violation(at + ": k and v must be two payloads of length " + std::to_string(*n) + " x KVH " +
                std::to_string(config.n_kv_heads) + " x D " + std::to_string(config.head_dim) +
                " x 4 = " + std::to_string(bytes) + " bytes");
      return;
    }
    std::vector<int32_t> positions;  // [slot], empty when the reply lists none
    if (const std::string why =
            wire::parse_cache_positions(r->control, int(*n), config.max_pos, positions);
        !why.empty()) {
      violation(at + ": " + why);
      return;
    }
    if (size_t(*n) != T) {
      bug(at + ": the cache holds " + std::to_string(*n) + " positions, " + std::to_string(T) +
          (want.positions.empty() ? " tokens fed" : " cells are held"));
      return;
    }
    // Listed positions must be the history's (slot i at position i without
    // one); a reply that lists none is checked on its K/V alone, as P6 does.
    if (!positions.empty()) {
      std::vector<int32_t> expected = want.positions;
      for (size_t i = expected.size(); i < T; ++i) expected.push_back(int32_t(i));
      if (positions != expected) {
        size_t i = 0;
        while (positions[i] == expected[i]) ++i;
        bug(at + ": slot " + std::to_string(i) + " holds position " + std::to_string(positions[i]) +
            ", the history puts " + std::to_string(expected[i]) + " there");
        return;
      }
    }
    int wrong = 0;
    for (int kv = 0; kv < 2; ++kv) {
      const std::vector<double>& exact = kv == 0 ? want.k : want.v;
      const std::vector<double>& b = kv == 0 ? want.k_bound : want.v_bound;
      for (size_t i = 0; i < T * width; ++i) {
        float got;
        std::memcpy(&got, r->payloads[size_t(kv)].data() + 4 * i, 4);
        const size_t o = size_t(layer) * T * width + i;
        wrong += !(std::fabs(double(got) - exact[o]) <= b[o]);
      }
    }
    if (wrong > 0)
      bug(at + ": " + std::to_string(wrong) + " cached K/V values disagree with the oracle");
    else
      ok(at + ": K and V [" + std::to_string(T) + "][" + std::to_string(config.n_kv_heads) + "][" +
         std::to_string(config.head_dim) + "] within the oracle's bound" +
         (positions.empty() ? std::string(want.positions.empty() ? "" : " (no positions listed)")
                            : std::string(", positions as the history's")));
  }

  // A request that makes an id: protocol 2 names it in `key` (and a reply
  // may echo it), protocol 1 reads it from the reply.
  std::optional<int64_t> make(const std::string& what, json request, const char* key) {
    const int64_t named = ++next_id_;
    if (version_ >= 2) request[key] = named;
    const auto r = call_ok(what, request);
    if (!r) return std::nullopt;
    if (version_ < 2) return integer(what, *r, key);
    const auto echo = r->control.find(key);
    if (echo != r->control.end() && *echo != named) {
      violation(what + ": \"" + key + "\" " + echo->dump() + " in the reply, kvcheck named " +
                std::to_string(named));
      return std::nullopt;
    }
    return named;
  }

  // An engine of the tiny model: capacity kCapacity, kMaxRows rows, f32.
  std::optional<int64_t> create(const std::string& what, int64_t model) {
    return make(what,
                {{"op", "create"},
                 {"model", model},
                 {"capacity", kCapacity},
                 {"max_rows", kMaxRows},
                 {"kv_dtype", "f32"}},
                "engine");
  }

  std::optional<int64_t> start(const std::string& what, int64_t engine) {
    const auto s = make(what, {{"op", "start"}, {"engine", engine}}, "sequence");
    if (s) ok(what + ": sequence " + std::to_string(*s));
    return s;
  }

  void model_session(const EngineTraits& traits, const Config& config) {
    const std::string m = std::string(family_name(config.family)) +
                          (config.n_kv_heads < config.n_heads ? " gqa" : "");
    const Weights weights = init_weights(config, kWeightSeed);
    const OperationTraits& ops = traits.operations;
    const auto model = make(
        m + ": load", {{"op", "load"}, {"path", folders_.folder(config, weights).path}}, "model");
    if (!model) return;
    ok(m + ": load");
    const auto engine = create(m + ": create", *model);
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
    const int64_t unknown = std::max(*s1, *s2) + 1000;
    if (ops.capacity_refusal) {
      expect_refusal(
          m + ": step past capacity",
          {{"op", "step"},
           {"engine", *engine},
           {"entries",
            {{{"sequence", *s1}, {"tokens", std::vector<int32_t>(kCapacity - 3, tok(7))}}}}},
          "capacity", {1, size_t(kCapacity) * size_t(V) * 4});
      length(m + ": length after the refusal", *engine, *s1, 4);
    }
    expect_refusal(
        m + ": step with token " + std::to_string(V),
        {{"op", "step"}, {"engine", *engine}, {"entries", {{{"sequence", *s1}, {"tokens", {V}}}}}},
        "bad_token", {1, size_t(V) * 4});
    expect_refusal(m + ": length of an unknown sequence",
                   {{"op", "length"}, {"engine", *engine}, {"sequence", unknown}},
                   "unknown_sequence");
    json full = {{"op", "start"}, {"engine", *engine}};
    if (version_ >= 2) full["sequence"] = ++next_id_;
    expect_refusal(m + ": start with every row taken", full, "rows");
    if (ops.finish) {
      if (call_ok(m + ": finish", {{"op", "finish"}, {"engine", *engine}, {"sequence", *s2}}))
        ok(m + ": finish");
      expect_refusal(m + ": length of a finished sequence",
                     {{"op", "length"}, {"engine", *engine}, {"sequence", *s2}},
                     "unknown_sequence");
      // The freed row is reused: its old cache must not leak into the new sequence.
      std::vector<int32_t> c = {tok(8), tok(9), tok(10)};
      if (const auto s3 = start(m + ": start in the freed row", *engine)) {
        step(m + ": step in the reused row", config, weights, *engine, {{*s3, &c, 3}});
        length(m + ": length in the reused row", *engine, *s3, 3);
      }
    }
    if (ops.reset) {
      if (call_ok(m + ": reset", {{"op", "reset"}, {"engine", *engine}})) ok(m + ": reset");
      expect_refusal(m + ": length after reset",
                     {{"op", "length"}, {"engine", *engine}, {"sequence", *s1}},
                     "unknown_sequence");
      std::vector<int32_t> d = {tok(11), tok(12)};
      if (const auto s4 = start(m + ": start after reset", *engine)) {
        step(m + ": step after reset", config, weights, *engine, {{*s4, &d, 2}});
        length(m + ": length after reset", *engine, *s4, 2);
      }
    }
    if (call_ok(m + ": destroy", {{"op", "destroy"}, {"engine", *engine}})) ok(m + ": destroy");
    if (ops.fork || ops.truncate) operations_session(m, ops, config, weights, *model);
    if ((ops.erase || ops.shift) && config.family == Family::kLlama)
      context_shift_session(m, ops, config, weights, *model);
    if (call_ok(m + ": unload", {{"op", "unload"}, {"model", *model}})) ok(m + ": unload");
  }

  // fork and truncate (docs/OPERATIONS.md) on an engine of their own: a
  // child's and a truncated sequence's next logits against the oracle on
  // their content, lengths, and the refusals the operations owe.
  void operations_session(const std::string& m, const OperationTraits& ops, const Config& config,
                          const Weights& weights, int64_t model) {
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
  void context_shift_session(const std::string& m, const OperationTraits& ops, const Config& config,
                             const Weights& weights, int64_t model) {
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
    const int64_t unknown = *s + 1000;
    if (ops.erase) {
      expect_refusal(
          m + ": erase of an unknown sequence",
          {{"op", "erase"}, {"engine", *engine}, {"sequence", unknown}, {"p0", 0}, {"p1", 1}},
          "unknown_sequence");
      expect_refusal(m + ": erase [2, 1)",
                     {{"op", "erase"}, {"engine", *engine}, {"sequence", *s}, {"p0", 2}, {"p1", 1}},
                     "bad_batch");
      length(m + ": length after the refusal", *engine, *s, cells);
    }
    if (ops.shift) {
      expect_refusal(m + ": shift below position 0",
                     {{"op", "shift"},
                      {"engine", *engine},
                      {"sequence", *s},
                      {"p0", 0},
                      {"p1", config.max_pos},
                      {"delta", -config.max_pos}},
                     "bad_batch");
      length(m + ": length after the refusal", *engine, *s, cells);
    }
    if (call_ok(m + ": destroy (erase and shift)", {{"op", "destroy"}, {"engine", *engine}}))
      ok(m + ": destroy (erase and shift)");
  }

  void op_unknown() { expect_refusal("an unknown op", {{"op", "kvcheck-no-such-op"}}, "input"); }

  ChildProcess child_;
  ModelFolders folders_;
  int checks_ = 0, violations_ = 0, bugs_ = 0;
  int version_ = 1;      // agreed in hello
  int64_t next_id_ = 0;  // the last id named (protocol 2)
};

int run_check_adapter(const CheckAdapterOptions& o) {
  const BackendSpec spec = parse_backend_spec(o.backend);
  if (!spec.name.starts_with("exec:"))
    throw InputError("--backend " + o.backend + ": check-adapter checks exec: backends only");
  reject_unknown_options(spec, {"timeout", "spin"});
  const std::string command = spec.name.substr(5);
  if (command.find_first_not_of(" \t") == std::string::npos)
    throw InputError("--backend exec: needs a command, e.g. exec:'python3 engine.py'");
  const ChildWaits waits = exec_waits(spec);
  std::printf("check-adapter: %s (per-call timeout %lld ms)\n", o.backend.c_str(),
              (long long)waits.timeout.count());
  std::unique_ptr<AdapterCheck> check;
  try {
    check = std::make_unique<AdapterCheck>(command, waits);
  } catch (const ChildFault& e) {
    throw InputError(std::string("check-adapter: ") + e.what());
  }
  return check->run();
}

}  // namespace

Action add_check_adapter(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "check-adapter",
      "Exercise every message of the engine protocol on an exec: backend; report protocol "
      "violations (the adapter's side) apart from cache bugs (the engine's side)");
  auto o = std::make_shared<CheckAdapterOptions>();
  cmd->add_option("--backend", o->backend,
                  "exec:'CMD ARGS'[?OPTIONS]: timeout=SECONDS, spin=MICROSECONDS, joined by &")
      ->required();
  return [cmd, o]() { return cmd->parsed() ? run_check_adapter(*o) : -1; };
}

}  // namespace kvcheck::cli
