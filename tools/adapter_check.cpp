// AdapterCheck's requests, replies and answers (tools/adapter_check.h): each
// request and what its reply must be, each answer against the oracle within
// the derived bound, and the report's lines.
#include "tools/adapter_check.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "backends/exec/exec_reply.h"
#include "engine/traits_json.h"
#include "model/status.h"
#include "oracle/oracle.h"
#include "properties/tolerance.h"

namespace kvcheck::cli {

using wire::Reply;

namespace {

Config llama_gqa() {
  Config c = llama_tiny();
  c.n_kv_heads = c.n_heads / 2;  // GQA: repeat vs repeat_interleave matters
  return c;
}

}  // namespace

Config fitted_for_adapter(Config c, const ShapeLimits& limits) {
  const int m = limits.head_dim_multiple;
  if (m > 1) c.head_dim = (c.head_dim + m - 1) / m * m;
  apply_shape_rules(c, limits);
  return c;
}

int AdapterCheck::run() {
  try {
    if (const std::optional<EngineTraits> traits = hello()) {
      std::vector<Config> checked;
      for (Config config : {llama_gqa(), gpt2_tiny()}) {
        config = fitted_for_adapter(config, traits->limits);
        const std::string refused =
            traits->refuses(config, KvDtype::kF32, kAdapterCapacity, kAdapterMaxRows);
        if (!refused.empty()) {
          std::printf("  skip %s: the traits refuse it (%s)\n", family_name(config.family),
                      refused.c_str());
          continue;
        }
        checked.push_back(config);
        model_session(*traits, config);
      }
      if (checked.empty()) throw InputError("check-adapter: the traits accept neither tiny model");
      shapes_session(*traits, checked);
      op_unknown();
    }
  } catch (const SessionOver&) {
    std::printf("  the remaining checks did not run: the child is gone\n");
  }
  summary();
  return violations_ + bugs_ + refused_shapes_ > 0 ? 1 : 0;
}

void AdapterCheck::ok(const std::string& what) {
  ++checks_;
  std::printf("  ok                  %s\n", what.c_str());
}

void AdapterCheck::violation(const std::string& what) {
  ++checks_, ++violations_;
  std::printf("  PROTOCOL VIOLATION  %s\n", what.c_str());
}

void AdapterCheck::bug(const std::string& what) {
  ++checks_, ++bugs_;
  std::printf("  CACHE BUG           %s\n", what.c_str());
}

void AdapterCheck::refused_shape(const Shape& shape, const std::string& why) {
  ++checks_, ++refused_shapes_;
  std::string reason;  // the refusal, its trace's lines under it
  for (const char c : why)
    reason += c == '\n' ? std::string("\n                      ") : std::string(1, c);
  std::printf(
      "  SHAPE REFUSED       %s: the traits allow it; declare %s, or make the engine take it\n"
      "                      %s\n",
      shape.what.c_str(), limit_for(shape.config).c_str(), reason.c_str());
}

std::string limit_for(const Config& c) {
  const std::string family = std::string("[\"") + family_name(c.family) + "\"]";
  std::vector<std::string> limits;
  if (c.n_kv_heads != c.n_heads) limits.push_back("limits.mha_only");
  if (c.n_heads * c.head_dim != c.d_model)
    limits.push_back("limits.query_width_is_d_model " + family);
  if (c.family == Family::kGpt2 && c.d_ff != 4 * c.d_model)
    limits.push_back("limits.d_ff_is_4x_d_model " + family);
  // An engine of the other family's positions: said for llama shapes (a
  // from-scratch GPT has learned positions) and where nothing else differs.
  if (c.family == Family::kLlama || limits.empty())
    limits.push_back(std::string("limits.positions [\"") +
                     positions_name(c.family == Family::kGpt2 ? Family::kLlama : Family::kGpt2) +
                     "\"]");
  std::string out;
  for (const std::string& l : limits) out += (out.empty() ? "" : " or ") + l;
  return out;
}

void AdapterCheck::summary() const {
  std::printf(
      "check-adapter: %d checks, %d protocol violations, %d cache bugs, %d refused shapes\n",
      checks_, violations_, bugs_, refused_shapes_);
  if (violations_ > 0)
    std::printf(
        "  protocol violations are the adapter's side: framing, replies, types, shapes "
        "(docs/ENGINE_PROTOCOL.md)\n");
  if (bugs_ > 0)
    std::printf(
        "  cache bugs are the engine's side: values or refusals the oracle and "
        "engine/engine.h disagree with\n");
  if (refused_shapes_ > 0)
    std::printf(
        "  refused shapes are the traits' side: models the traits allow that the engine cannot "
        "load or step (limits in docs/ENGINES.md)\n");
}

// One request; a reply that does not parse or never comes ends the session.
Reply AdapterCheck::call(const std::string& what, const json& request, wire::ReplyLimits limits) {
  try {
    return child_.call(request, limits);
  } catch (const ChildFault& e) {
    violation(what + ": " + e.what());
    throw SessionOver{};
  }
}

// A reply that must succeed; an error reply is a violation (the request was
// well formed) and nullopt.
std::optional<Reply> AdapterCheck::call_ok(const std::string& what, const json& request,
                                           wire::ReplyLimits limits) {
  return call_ok_reply(what, call(what, request, limits));
}

// A reply to a well-formed request: an error reply is a violation.
std::optional<Reply> AdapterCheck::call_ok_reply(const std::string& what, Reply r) {
  if (r.error) {
    violation(what + ": a well-formed request got error " + r.error->kind + ": " +
              wire::error_text(*r.error));
    return std::nullopt;
  }
  return r;
}

// An integer field, or a violation naming it.
std::optional<int64_t> AdapterCheck::integer(const std::string& what, const Reply& r,
                                             const char* key) {
  const auto it = r.control.find(key);
  if (it == r.control.end() || !it->is_number_integer()) {
    violation(what + ": \"" + key + "\" must be an integer, got " +
              (it == r.control.end() ? std::string("nothing") : it->dump()));
    return std::nullopt;
  }
  return it->get<int64_t>();
}

// A request that must be refused with `kind`.
void AdapterCheck::expect_refusal(const std::string& what, const json& request,
                                  const std::string& kind, wire::ReplyLimits limits) {
  const Reply r = call(what, request, limits);
  if (!r.error)
    bug(what + ": accepted; engine/engine.h refuses it with " + kind);
  else if (r.error->kind != kind)
    violation(what + ": refused with kind " + r.error->kind + ", the protocol's kind is " + kind +
              " (" + wire::error_text(*r.error) + ")");
  else
    ok(what + ": refused with " + kind);
}

std::optional<EngineTraits> AdapterCheck::hello() {
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
    violation("hello: error " + r.error->kind + ": " + wire::error_text(*r.error));
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
  ok("hello: protocol " + std::to_string(version_) + ", traits of " + traits.value().identity.name +
     " " + traits.value().identity.version);
  return traits.value();
}

// The logits rows of `tokens_so_far[from, to)` against the oracle.
void AdapterCheck::compare_logits(const std::string& what, const Config& config,
                                  const Weights& weights, const std::vector<int32_t>& tokens,
                                  int from, const float* rows) {
  const oracle::Output exact = oracle::forward(config, weights, tokens);
  const ErrorBounds bound = derive_error_bounds(config, weights, tokens, KvDtype::kF32);
  compare_rows(what, config.vocab, exact.logits, bound.logits, from, int(tokens.size()), rows);
}

// Rows [from, to) of exact logits [rows][V] and their bounds against the
// engine's, rows[0] being row `from`.
void AdapterCheck::compare_rows(const std::string& what, int V, const std::vector<double>& exact,
                                const std::vector<double>& bound, int from, int to,
                                const float* rows, const char* unit) {
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
void AdapterCheck::step(const std::string& what, const Config& config, const Weights& weights,
                        int64_t engine, const std::vector<Fed>& fed) {
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
  std::vector<float> logits;
  if (!r || !logits_of(what, *r, n, config.vocab, logits)) return;
  size_t row = 0;
  for (const Fed& f : fed) {
    compare_logits(what + ", sequence " + std::to_string(f.sequence), config, weights, *f.tokens,
                   int(f.tokens->size()) - f.fresh, logits.data() + row * size_t(config.vocab));
    row += size_t(f.fresh);
  }
}

// A step reply's logits [n][V], or a violation naming the shape it has.
bool AdapterCheck::logits_of(const std::string& what, const Reply& r, size_t n, int vocab,
                             std::vector<float>& logits) {
  const size_t bytes = n * size_t(vocab) * 4;
  if (r.payloads.size() != 1 || r.payloads[0].size() != bytes) {
    std::string got = std::to_string(r.payloads.size()) + " payloads";
    if (r.payloads.size() == 1) got = std::to_string(r.payloads[0].size()) + " bytes";
    violation(what + ": logits must be one payload of " + std::to_string(n) + " tokens x vocab " +
              std::to_string(vocab) + " x 4 = " + std::to_string(bytes) + " bytes, got " + got);
    return false;
  }
  ok(what + ": one payload of [" + std::to_string(n) + "][" + std::to_string(vocab) + "] f32");
  logits.resize(n * size_t(vocab));
  std::memcpy(logits.data(), r.payloads[0].data(), bytes);
  return true;
}

void AdapterCheck::length(const std::string& what, int64_t engine, int64_t sequence, int want) {
  const auto r = call_ok(what, {{"op", "length"}, {"engine", engine}, {"sequence", sequence}});
  if (!r) return;
  const auto n = integer(what, *r, "length");
  if (!n) return;
  if (*n != want)
    bug(what + ": length " + std::to_string(*n) + ", " + std::to_string(want) + " tokens fed");
  else
    ok(what + ": length " + std::to_string(want));
}

void AdapterCheck::cache(const std::string& what, const Config& config, const Weights& weights,
                         int64_t engine, int64_t sequence, const std::vector<int32_t>& tokens) {
  const oracle::Output exact = oracle::forward(config, weights, tokens);
  const ErrorBounds bound = derive_error_bounds(config, weights, tokens, KvDtype::kF32);
  const CachedKv want{exact.k, exact.v, bound.k, bound.v, {}};
  for (int layer = 0; layer < config.n_layers; ++layer)
    cache_layer(what + " layer " + std::to_string(layer), config, engine, sequence, layer,
                tokens.size(), want);
}

// One layer's cache reply: its shape (a protocol matter), then its slot
// count, listed positions and K/V against `want` (the engine's).
void AdapterCheck::cache_layer(const std::string& at, const Config& config, int64_t engine,
                               int64_t sequence, int layer, size_t T, const CachedKv& want) {
  const size_t width = size_t(config.kv_width());
  const auto r =
      call_ok(at, {{"op", "cache"}, {"engine", engine}, {"sequence", sequence}, {"layer", layer}},
              {4, size_t(kAdapterCapacity) * width * 4 * 4 + 4096});
  if (!r) return;
  const auto n = integer(at, *r, "length");
  if (!n) return;
  const size_t bytes = size_t(std::max<int64_t>(*n, 0)) * width * 4;
  // Whole slots but not `length` of them: the engine's length() and its
  // cache() disagree, its own cache's bug (as a campaign reports it).
  const size_t slot = width * 4;
  if (r->payloads.size() == 2 &&
      (r->payloads[0].size() != bytes || r->payloads[1].size() != bytes) &&
      r->payloads[0].size() % slot == 0 && r->payloads[1].size() % slot == 0 && *n >= 0) {
    bug(at + ": the length is " + std::to_string(*n) + " (length()), but K holds " +
        std::to_string(r->payloads[0].size() / slot) + " slots and V " +
        std::to_string(r->payloads[1].size() / slot) +
        " (cache()): the cache disagrees with itself");
    return;
  }
  if (r->payloads.size() != 2 || r->payloads[0].size() != bytes || r->payloads[1].size() != bytes) {
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
std::optional<int64_t> AdapterCheck::make(const std::string& what, json request, const char* key,
                                          const Shape* shape) {
  const int64_t named = ++next_id_;
  if (version_ >= 2) request[key] = named;
  const Reply reply = call(what, request);
  if (reply.error && shape != nullptr) {
    refused_shape(*shape, request.value("op", std::string()) + " refused: " + reply.error->kind +
                              ": " + wire::error_text(*reply.error));
    return std::nullopt;
  }
  const std::optional<Reply> r = call_ok_reply(what, reply);
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

// An engine of the tiny model: capacity kAdapterCapacity, kAdapterMaxRows rows, f32.
std::optional<int64_t> AdapterCheck::create(const std::string& what, int64_t model,
                                            const Shape* shape) {
  return make(what,
              {{"op", "create"},
               {"model", model},
               {"capacity", kAdapterCapacity},
               {"max_rows", kAdapterMaxRows},
               {"kv_dtype", "f32"}},
              "engine", shape);
}

std::optional<int64_t> AdapterCheck::start(const std::string& what, int64_t engine) {
  const auto s = make(what, {{"op", "start"}, {"engine", engine}}, "sequence");
  if (s) ok(what + ": sequence " + std::to_string(*s));
  return s;
}

}  // namespace kvcheck::cli
