#include "properties/property.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>

#include "model/rng.h"
#include "model/status.h"
#include "oracle/oracle.h"
#include "properties/runner.h"
#include "properties/tolerance.h"

namespace kvcheck {

namespace {

struct PropertyInfo {
  std::string_view name;
  std::string_view label;
};

constexpr std::array<PropertyInfo, kPropertyCount> kInfo = {{
    {"oracle", "P1"},
    {"chunking", "P2"},
    {"batch", "P3"},
    {"reset", "P4"},
    {"compaction", "P5"},
    {"cache_state", "P6"},
    {"gqa", "P7"},
    {"determinism", "P8"},
    {"capacity", "P9"},
    {"cross_engine", "P10"},
    {"sharing", "P11"},
    {"rollback", "P12"},
    {"pool", "P13"},
    {"poison", "P14"},
    {"prefix", "P15"},
}};

// Salts that keep the derived random choices of different properties apart.
constexpr uint64_t kChunkingSalt = 0x6368756e6b696e67ull;  // "chunking"
constexpr uint64_t kDummySalt = 0x64756d6d79746f6bull;     // "dummytok"
constexpr uint64_t kCapacitySalt = 0x6361706163697479ull;  // "capacity"

// Everything a property needs about the scenario, computed once.
struct Context {
  const Scenario& scenario;
  const EngineUnderTest& subject;
  const EngineFactory& factory;  // subject.factory
  const Weights& weights;        // scenario_weights(scenario)
  SchedulePlan plan;
  uint64_t digest;
  int vocab;
  // The scenario's run that check_property's pool probe already made (the
  // same calls on a fresh engine from the same factory): the property's own
  // first run of the scenario takes it instead of running it again.
  mutable std::optional<RunResult> probe_run;
  // No probe was made (the pool may run dry and the property's first run is
  // the scenario's): that run is the probe, and a refusal in it ends the
  // property with PoolRanDry.
  bool first_run_probes = false;
};

// Thrown by the first run of a scenario that was not probed when its pool
// ran dry: check_property then checks the calls before the refusal, with
// this run (which stopped there) as theirs.
struct PoolRanDry {
  RunResult run;
};

// ---- Caches of what depends on the model alone --------------------------
//
// Callers check several properties on one scenario in a row (check_all runs
// all nine; RapidCheck's shrinking re-checks scenarios that differ in one
// gene), and the weights (scenario_weights) and each sequence's oracle
// reference are pure functions of (config, weight seed or checkpoint[, KV
// dtype, tokens]) that the engine never touches. Both caches are per thread,
// hold only the most recent model, are bounded, and return exactly what a fresh computation
// returns, so no verdict depends on them; they only skip recomputing it.

// What P1 and P6 compare against, for one sequence's fed tokens.
struct SequenceReference {
  oracle::Output oracle;
  ErrorBounds bounds;
  // A history reference (erase, shift): the position each cell holds,
  // [cell]; empty for a plain one (cell i holds position i).
  std::vector<int32_t> positions;
};

// The references of the most recent model (config, weight seed, KV dtype),
// keyed by the tokens: at most kMaxEntries sequences and kMaxBytes in all,
// least recently used dropped first. A new model empties it.
class ReferenceCache {
 public:
  static constexpr size_t kMaxEntries = 16;
  static constexpr size_t kMaxBytes = size_t(32) << 20;

  std::shared_ptr<const SequenceReference> get(const Config& config, uint64_t seed,
                                               const Checkpoint* model, KvDtype kv_dtype,
                                               bool rope_angles_in_float, const Weights& weights,
                                               std::span<const int32_t> tokens) {
    if (!valid_ || seed_ != seed || model_ != model || kv_dtype_ != kv_dtype ||
        rope_angles_in_float_ != rope_angles_in_float || !(config_ == config)) {
      entries_.clear();
      bytes_ = 0;
      config_ = config;
      seed_ = seed;
      model_ = model;
      kv_dtype_ = kv_dtype;
      rope_angles_in_float_ = rope_angles_in_float;
      valid_ = true;
    }
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (std::equal(tokens.begin(), tokens.end(), entries_[i].tokens.begin(),
                     entries_[i].tokens.end())) {
        Entry hit = std::move(entries_[i]);  // most recently used goes last
        entries_.erase(entries_.begin() + std::ptrdiff_t(i));
        entries_.push_back(std::move(hit));
        return entries_.back().reference;
      }
    }
    auto reference = std::make_shared<SequenceReference>();
    if (const SequenceReference* longer = holding_prefix(tokens)) {
      // A run cut short (a small pool refused a step) asks for prefixes of
      // what its full run's references held: causal, so the rows are exact.
      const int n = static_cast<int>(tokens.size());
      reference->oracle = oracle::prefix(longer->oracle, n, config.n_layers);
      reference->bounds = prefix(longer->bounds, n, config.n_layers);
    } else {
      reference->oracle = oracle::forward(config, weights, tokens);
      reference->bounds =
          derive_error_bounds(config, weights, tokens, kv_dtype, rope_angles_in_float);
    }
    const size_t bytes =
        sizeof(double) *
            (reference->oracle.logits.size() + reference->oracle.k.size() +
             reference->oracle.v.size() + reference->bounds.logits.size() +
             reference->bounds.k.size() + reference->bounds.v.size() +
             reference->bounds.k_computed.size() + reference->bounds.v_computed.size()) +
        sizeof(int32_t) * tokens.size();
    if (bytes > kMaxBytes) return reference;  // too big to keep
    while (!entries_.empty() && (entries_.size() >= kMaxEntries || bytes_ + bytes > kMaxBytes)) {
      bytes_ -= entries_.front().bytes;
      entries_.erase(entries_.begin());
    }
    entries_.push_back({std::vector<int32_t>(tokens.begin(), tokens.end()), reference, bytes});
    bytes_ += bytes;
    return reference;
  }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::shared_ptr<const SequenceReference> reference;
    size_t bytes = 0;
  };

  // A reference of a longer sequence that starts with `tokens`, if one is held.
  const SequenceReference* holding_prefix(std::span<const int32_t> tokens) const {
    for (const Entry& entry : entries_) {
      if (entry.tokens.size() > tokens.size() &&
          std::equal(tokens.begin(), tokens.end(), entry.tokens.begin()))
        return entry.reference.get();
    }
    return nullptr;
  }
  bool valid_ = false;
  Config config_;
  uint64_t seed_ = 0;
  const Checkpoint* model_ = nullptr;  // the scenario's checkpoint, or null for seeded weights
  KvDtype kv_dtype_ = KvDtype::kF32;
  bool rope_angles_in_float_ = false;
  std::vector<Entry> entries_;  // least recently used first
  size_t bytes_ = 0;
};

std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       std::span<const int32_t> tokens) {
  thread_local ReferenceCache cache;
  // The subject's angle model; a P10 reference that computes them in double
  // is within this larger bound too.
  return cache.get(context.scenario.config, context.scenario.weight_seed,
                   context.scenario.model.get(), context.scenario.kv_dtype,
                   context.subject.traits.arithmetic.rope_angles_in_float, context.weights, tokens);
}

// The reference of one segment: the oracle of its content, or for a
// sequence with an erase or shift the replay of its history
// (docs/ORACLE.md, "Context shift"): oracle rows per feed, K/V per cell.
std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       const Segment& segment) {
  if (segment.history.empty()) return reference_for(context, segment.tokens);
  const Config& config = context.scenario.config;
  oracle::CellOutput replay = oracle::replay(config, context.weights, segment.history);
  HistoryBounds bounds =
      derive_history_bounds(config, context.weights, segment.history, context.scenario.kv_dtype,
                            context.subject.traits.arithmetic.rope_angles_in_float);
  auto reference = std::make_shared<SequenceReference>();
  reference->oracle.n_tokens = static_cast<int>(replay.positions.size());
  reference->oracle.logits = std::move(replay.logits);
  reference->oracle.k = std::move(replay.k);
  reference->oracle.v = std::move(replay.v);
  reference->positions = std::move(replay.positions);
  reference->bounds.n_tokens = reference->oracle.n_tokens;
  reference->bounds.logits = std::move(bounds.logits);
  reference->bounds.k = std::move(bounds.k);
  reference->bounds.v = std::move(bounds.v);
  reference->bounds.k_computed = std::move(bounds.k_computed);
  reference->bounds.v_computed = std::move(bounds.v_computed);
  return reference;
}

std::string describe_chunks(const std::vector<int>& chunks) {
  std::string text;
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) text += "+";
    text += std::to_string(chunks[i]);
  }
  return text.empty() ? "(none)" : text;
}

std::string format_double(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.9g", value);
  return buffer;
}

Verdict start_verdict(Property property) {
  Verdict verdict;
  verdict.property = property;
  return verdict;
}

Verdict not_applicable(Property property, std::string why) {
  Verdict verdict = start_verdict(property);
  verdict.applicable = false;
  verdict.summary = std::string(property_label(property)) + " " +
                    std::string(property_name(property)) + ": not applicable: " + why;
  return verdict;
}

void fail(Verdict& verdict, Location where, const std::string& summary, std::string detail) {
  verdict.passed = false;
  verdict.where = where;
  verdict.summary = std::string(property_label(verdict.property)) + " " +
                    std::string(property_name(verdict.property)) + ": " + summary;
  verdict.detail = std::move(detail);
}

void pass(Verdict& verdict, const std::string& what) {
  verdict.summary = std::string(property_label(verdict.property)) + " " +
                    std::string(property_name(verdict.property)) + ": passed: " + what;
}

// A refusal of a call the scenario's validation allows is the engine's bug.
Verdict engine_refused(Property property, const RunResult& run, const std::string& which_run) {
  Verdict verdict = start_verdict(property);
  Location where;
  where.call = run.failed_call;
  fail(verdict, where,
       "call " + std::to_string(run.failed_call) + " of " + which_run +
           (run.threw ? ": the engine threw on a valid call: " + run.error_message
                      : std::string(": the engine refused a valid call")),
       (run.threw ? "exception: " : "EngineError: ") + run.error_message + "\n");
  return verdict;
}

// The scenario on the subject: the pool probe's run where there is one,
// else a fresh run (with `meanwhile`, Meanwhile in runner.h), which throws
// PoolRanDry where it is the probe and a step was refused.
RunResult scenario_run(const Context& context, const Meanwhile& meanwhile = {}) {
  if (context.probe_run) {
    RunResult run = std::move(*context.probe_run);
    context.probe_run.reset();
    if (meanwhile && !run.engine_failed) meanwhile();
    return run;
  }
  RunResult run = run_scenario(context.scenario, context.weights, context.factory, {}, meanwhile);
  if (context.first_run_probes && run.refused) throw PoolRanDry{std::move(run)};
  return run;
}

// One sequence's logits from a solo run, or the refusal that stopped it.
struct SoloRun {
  std::vector<float> logits;  // [position][V]
  RunResult run;
  // A small pool (the scenario's or the backend's) ran dry in this run and
  // refused a step, changing nothing: data, not a failure, but its logits
  // stop there, so the comparisons that need this run are skipped.
  bool pool_ran_dry() const { return run.refused; }
};

SoloRun run_solo(const Context& context, std::span<const int32_t> tokens,
                 const std::vector<int>& chunks, int leading_dummies = 0, uint64_t dummy_seed = 0) {
  const Scenario solo =
      solo_scenario(context.scenario, tokens, chunks, leading_dummies, dummy_seed);
  SoloRun result;
  result.run = run_scenario(solo, context.weights, context.factory);
  result.logits = std::move(result.run.logits[0]);
  return result;
}

std::span<const int32_t> fed_tokens(const Context& context, int sequence) {
  return std::span<const int32_t>(context.scenario.sequences[size_t(sequence)])
      .first(size_t(context.plan.fed[size_t(sequence)]));
}

// What the engine promises for the comparison a property makes.
Invariance invariance_for_traits(const EngineTraits& traits, Property property) {
  const InvarianceTraits& i = traits.invariance;
  switch (property) {
    case Property::kChunking:
      return i.chunking;
    case Property::kBatch:
      return i.batch;
    case Property::kReset:
      return i.reset;
    case Property::kCompaction:
      return i.compaction;
    case Property::kGqa:
      return i.gqa_twin;
    case Property::kDeterminism:
      return i.determinism;
    case Property::kSharing:
      return i.sharing;
    case Property::kRollback:
      return i.rollback;
    case Property::kPrefix:
      return i.sharing;  // a hit shares another sequence's blocks
    default:
      return Invariance::kBitwise;
  }
}

Invariance invariance_for(const Context& context, Property property) {
  return invariance_for_traits(context.subject.traits, property);
}

// Index of the first logit where |a - b| > 2 B (B the derived bound of the
// sequence's tokens), or where either side is not finite; the triangle
// inequality through the exact logit makes 2 B the bound for two runs that
// each keep within B. Sizes must match, else min size.
std::optional<size_t> first_bound_violation(const Context& context,
                                            std::span<const int32_t> all_tokens,
                                            std::span<const float> a, std::span<const float> b,
                                            double* worst_ratio) {
  const size_t n = std::min(a.size(), b.size());
  if (n == 0) return a.size() == b.size() ? std::nullopt : std::optional<size_t>(0);
  const size_t positions = n / size_t(context.vocab);
  const std::shared_ptr<const SequenceReference> reference =
      reference_for(context, all_tokens.first(positions));
  for (size_t i = 0; i < n; ++i) {
    const double ratio =
        std::abs(double(a[i]) - double(b[i])) / (2.0 * reference->bounds.logits[i]);
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]) || !(ratio <= 1.0)) return i;
    *worst_ratio = std::max(*worst_ratio, ratio);
  }
  if (a.size() != b.size()) return n;
  return std::nullopt;
}

// The comparison of logits every property but P1 makes: the index of the
// first logit where a and b disagree, bit for bit or within 2 B as the
// engine declares. A NaN or infinity on either side disagrees whatever the
// invariance: equal NaN bits are not agreement, or an engine whose logits
// are all NaN would pass every bitwise comparison. (Rows a prefix hit
// reused are NaN by contract; callers zero them first, skip_rows.)
std::optional<size_t> first_difference(const Context& context, Invariance invariance,
                                       std::span<const int32_t> tokens, std::span<const float> a,
                                       std::span<const float> b, double* worst_ratio) {
  const std::optional<size_t> differ =
      invariance == Invariance::kBitwise
          ? first_bit_difference(a, b)
          : first_bound_violation(context, tokens, a, b, worst_ratio);
  const size_t end = std::min({differ.value_or(a.size()), a.size(), b.size()});
  for (size_t i = 0; i < end; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return i;
  }
  return differ;
}

// What a failed comparison found at `at`, for the summary: the side that
// holds a non-finite logit, its value and the verdict's call, else `differ`.
std::string disagreement(std::span<const float> a, const std::string& a_name,
                         std::span<const float> b, const std::string& b_name, size_t at, int call,
                         const std::string& differ) {
  for (const auto& [values, name] : {std::pair{a, &a_name}, std::pair{b, &b_name}}) {
    if (at < values.size() && !std::isfinite(values[at])) {
      return "non-finite logit " + format_double(values[at]) + " in " + *name +
             (call >= 0 ? " (call " + std::to_string(call) + ")" : std::string());
    }
  }
  return differ;
}

// A prefix hit leaves the logits of the tokens it reused uncomputed (NaN,
// RunResult::reused); comparisons skip those rows by zeroing them on both
// sides. Their K/V are still checked (P6), and so is every later token that
// reads them.
void skip_rows(std::vector<float>& logits, const std::vector<bool>& skipped, size_t V) {
  for (size_t k = 0; k < skipped.size() && (k + 1) * V <= logits.size(); ++k) {
    if (skipped[k]) std::fill_n(logits.begin() + std::ptrdiff_t(k * V), V, 0.0f);
  }
}

bool reused_at(const RunResult& run, size_t s, size_t k) {
  return s < run.reused.size() && k < run.reused[s].size() && run.reused[s][k];
}

// Rows reused in either of two runs of one sequence.
std::vector<bool> reused_in_either(const RunResult& a, const RunResult& b, size_t s) {
  std::vector<bool> out = s < a.reused.size() ? a.reused[s] : std::vector<bool>();
  if (s < b.reused.size()) {
    out.resize(std::max(out.size(), b.reused[s].size()), false);
    for (size_t k = 0; k < b.reused[s].size(); ++k) out[k] = out[k] || b.reused[s][k];
  }
  return out;
}

// Compares two runs of one sequence, bit for bit or within 2 B as the engine
// declares for this property. On a difference, fills the verdict with the
// first differing logit, located at the scenario call that fed that position.
bool same_logits(Verdict& verdict, const Context& context, int sequence,
                 const std::vector<float>& expected_in, const std::string& expected_name,
                 const std::vector<float>& got_in, const std::string& got_name,
                 const std::vector<bool>& skipped = {}) {
  const Invariance invariance = invariance_for(context, verdict.property);
  const bool bitwise = invariance == Invariance::kBitwise;
  // The bound is derived from the stream's tokens, which are a forked or
  // truncated sequence's content only where it is plain; P1, P11 and P12
  // check those within their own bounds.
  if (!bitwise && !context.plan.plain[size_t(sequence)]) return true;
  std::vector<float> expected_copy, got_copy;
  const bool skips = std::find(skipped.begin(), skipped.end(), true) != skipped.end();
  if (skips) {
    expected_copy = expected_in, got_copy = got_in;
    skip_rows(expected_copy, skipped, size_t(context.vocab));
    skip_rows(got_copy, skipped, size_t(context.vocab));
  }
  const std::vector<float>& expected = skips ? expected_copy : expected_in;
  const std::vector<float>& got = skips ? got_copy : got_in;
  const std::optional<size_t> at =
      first_difference(context, invariance, context.scenario.sequences[size_t(sequence)], expected,
                       got, &verdict.worst_ratio);
  if (!at) return true;
  const size_t V = size_t(context.vocab);
  const int position = static_cast<int>(*at / V);
  const int vocab_index = static_cast<int>(*at % V);
  Location where;
  where.sequence = sequence;
  where.position = position;
  const std::vector<int>& calls = context.plan.call_of_position[size_t(sequence)];
  where.call = position < static_cast<int>(calls.size()) ? calls[size_t(position)] : -1;
  std::ostringstream detail;
  detail << "sequence s" << sequence << ", position " << position << ", vocab index " << vocab_index
         << " (fed by call " << where.call << ")\n";
  if (*at < expected.size() && *at < got.size()) {
    detail << "  " << expected_name << ": " << float_with_bits(expected[*at]) << "\n";
    detail << "  " << got_name << ": " << float_with_bits(got[*at]) << "\n";
  } else {
    detail << "  " << expected_name << " has " << expected.size() / V << " positions, " << got_name
           << " has " << got.size() / V << "\n";
  }
  if (!bitwise) detail << "  (compared within 2B: the engine declares this invariance bounded)\n";
  fail(verdict, where,
       "s" + std::to_string(sequence) + " position " + std::to_string(position) + ": " +
           disagreement(expected, expected_name, got, got_name, *at, where.call,
                        std::string("logits ") + (bitwise ? "differ" : "differ by more than 2B") +
                            " between " + expected_name + " and " + got_name),
       detail.str());
  return false;
}

// ---- P1 ---------------------------------------------------------------

Verdict check_oracle(const Context& context) {
  Verdict verdict = start_verdict(Property::kOracle);
  // The references are computed while an engine in another process works on
  // the steps sent without waiting: the two overlap instead of taking turns.
  std::vector<std::vector<std::shared_ptr<const SequenceReference>>> references;  // [s][segment]
  const auto compute_references = [&] {
    references.resize(context.scenario.sequences.size());
    for (size_t s = 0; s < references.size(); ++s) {
      if (context.plan.fed[s] == 0) continue;
      for (const Segment& segment : context.plan.segments[s]) {
        references[s].push_back(segment.fed.empty() ? nullptr : reference_for(context, segment));
      }
    }
  };
  const RunResult run = scenario_run(context, compute_references);
  if (run.engine_failed) return engine_refused(Property::kOracle, run, "the scenario");
  if (references.empty()) compute_references();
  const Config& config = context.scenario.config;
  const size_t V = size_t(config.vocab);

  struct Finding {
    int call = -1, sequence = -1, position = -1, vocab_index = -1;
    double engine = 0, oracle = 0, bound = 0, ratio = 0;
    bool non_finite = false;
  };
  std::optional<Finding> first_non_finite, first_over;
  Finding worst;
  std::ostringstream per_sequence;
  const auto earlier = [](const std::optional<Finding>& current, const Finding& candidate) {
    return !current || candidate.call < current->call;
  };
  bool any = false;
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    const int T = context.plan.fed[s];
    if (T == 0) continue;
    any = true;
    const std::vector<float>& logits = run.logits[s];  // [stream index][V]
    Finding sequence_worst;
    bool sequence_non_finite = false, sequence_over = false;
    // Each token fed is checked against the oracle of what the sequence held
    // then: its segment's content (a fork child's starts with the parent's
    // prefix; a truncation opens a new segment). docs/OPERATIONS.md.
    for (size_t g = 0; g < context.plan.segments[s].size(); ++g) {
      const Segment& segment = context.plan.segments[s][g];
      if (segment.fed.empty()) continue;
      const std::shared_ptr<const SequenceReference>& cached = references[s][g];
      const oracle::Output& reference = cached->oracle;
      const ErrorBounds& bounds = cached->bounds;
      for (const auto& [k, position] : segment.fed) {
        if (reused_at(run, s, size_t(k))) continue;  // a prefix hit: not computed
        for (size_t j = 0; j < V; ++j) {
          const size_t i = size_t(k) * V + j, at = size_t(position) * V + j;
          const double engine = logits[i], exact = reference.logits[at], bound = bounds.logits[at];
          const double ratio = std::abs(engine - exact) / bound;
          const bool non_finite = !std::isfinite(engine);
          // A NaN ratio (a broken bound) must fail, never pass silently.
          const bool over = !(ratio <= 1.0);
          if (!non_finite && !over && ratio <= sequence_worst.ratio) continue;
          Finding f{context.plan.call_of_position[s][size_t(k)],
                    static_cast<int>(s),
                    position,
                    static_cast<int>(j),
                    engine,
                    exact,
                    bound,
                    non_finite || std::isnan(ratio) ? INFINITY : ratio,
                    non_finite};
          if (non_finite && !sequence_non_finite) {
            sequence_non_finite = true;
            if (earlier(first_non_finite, f)) first_non_finite = f;
          } else if (!non_finite && over && !sequence_over) {
            sequence_over = true;
            if (earlier(first_over, f)) first_over = f;
          }
          if (f.ratio > sequence_worst.ratio || sequence_worst.sequence < 0) sequence_worst = f;
        }
      }
    }
    per_sequence << "  s" << s << ": " << T << " positions, worst error/bound "
                 << format_double(sequence_worst.ratio) << " at position "
                 << sequence_worst.position << " vocab " << sequence_worst.vocab_index << "\n";
    if (sequence_worst.ratio > worst.ratio || worst.sequence < 0) worst = sequence_worst;
  }
  if (!any) return not_applicable(Property::kOracle, "no sequence is fed");
  verdict.worst_ratio = worst.ratio;

  const std::optional<Finding>& failure = first_non_finite ? first_non_finite : first_over;
  if (!failure) {
    pass(verdict, "worst error/bound " + format_double(worst.ratio));
    verdict.detail = per_sequence.str();
    return verdict;
  }
  const Finding& f = *failure;
  Location where;
  where.call = f.call;
  where.sequence = f.sequence;
  where.position = f.position;
  std::ostringstream detail;
  detail << "first failing logit: s" << f.sequence << " position " << f.position << " vocab "
         << f.vocab_index << " (fed by call " << f.call << ")\n"
         << "  engine " << format_double(f.engine) << "  oracle " << format_double(f.oracle)
         << "  |error| " << format_double(std::abs(f.engine - f.oracle)) << "  bound "
         << format_double(f.bound) << "  error/bound " << format_double(f.ratio) << "\n"
         << "per sequence:\n"
         << per_sequence.str();
  fail(verdict, where,
       f.non_finite ? "s" + std::to_string(f.sequence) + " position " + std::to_string(f.position) +
                          ": non-finite logit " + format_double(f.engine)
                    : "s" + std::to_string(f.sequence) + " position " + std::to_string(f.position) +
                          ": error/bound " + format_double(f.ratio) + " > 1",
       detail.str());
  return verdict;
}

// ---- P2 ---------------------------------------------------------------

std::vector<int> random_split(uint64_t seed, int n) {
  SplitMix64 rng(seed);
  std::vector<int> chunks;
  while (n > 0) {
    const int length = static_cast<int>(rng.in_range(1, n));
    chunks.push_back(length);
    n -= length;
  }
  return chunks;
}

Verdict check_chunking(const Context& context) {
  Verdict verdict = start_verdict(Property::kChunking);
  int checked = 0;
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    const int T = context.plan.fed[s];
    if (T < 2 || !context.plan.plain[s]) continue;  // one token has one chunking
    ++checked;
    const int sequence = static_cast<int>(s);
    const std::vector<int>& own = context.plan.chunks[s];
    const SoloRun base = run_solo(context, fed_tokens(context, sequence), own);
    if (base.run.engine_failed) {
      return engine_refused(Property::kChunking, base.run, "the solo run of s" + std::to_string(s));
    }
    if (base.pool_ran_dry()) {
      --checked;
      continue;
    }
    const std::vector<std::pair<std::string, std::vector<int>>> others = {
        {"whole", {T}},
        {"token by token", std::vector<int>(size_t(T), 1)},
        {"random split", random_split(context.digest ^ kChunkingSalt ^ s, T)},
    };
    for (const auto& [name, chunks] : others) {
      if (chunks == own) continue;
      const SoloRun other = run_solo(context, fed_tokens(context, sequence), chunks);
      if (other.run.engine_failed) {
        return engine_refused(Property::kChunking, other.run,
                              "the " + name + " run of s" + std::to_string(s));
      }
      if (other.pool_ran_dry()) continue;
      if (!same_logits(verdict, context, sequence, base.logits,
                       "the scenario's chunking " + describe_chunks(own), other.logits,
                       name + " " + describe_chunks(chunks))) {
        return verdict;
      }
    }
  }
  if (checked == 0) {
    return not_applicable(Property::kChunking, "no plain sequence has 2 tokens fed");
  }
  pass(verdict, std::to_string(checked) + " sequences under 3 other chunkings");
  return verdict;
}

// ---- P3, P4, P5: a scenario run against solo runs -----------------------

// Compares the scenario's logits of every selected sequence with its solo run
// on a fresh engine under the same chunking.
bool scenario_matches_solo(Verdict& verdict, const Context& context, const RunResult& run,
                           const std::vector<bool>& selected, const std::string& why) {
  for (size_t s = 0; s < selected.size(); ++s) {
    if (!selected[s] || context.plan.fed[s] == 0 || !context.plan.plain[s]) continue;
    const int sequence = static_cast<int>(s);
    const SoloRun solo = run_solo(context, fed_tokens(context, sequence), context.plan.chunks[s]);
    if (solo.run.engine_failed) {
      verdict = engine_refused(verdict.property, solo.run, "the solo run of s" + std::to_string(s));
      return false;
    }
    if (solo.pool_ran_dry()) continue;
    if (!same_logits(verdict, context, sequence, solo.logits, "its solo run on a fresh engine",
                     run.logits[s], "the scenario (" + why + ")",
                     s < run.reused.size() ? run.reused[s] : std::vector<bool>())) {
      return false;
    }
  }
  return true;
}

int count_fed(const Context& context, const std::vector<bool>& selected) {
  int n = 0;
  for (size_t s = 0; s < selected.size(); ++s) {
    n += selected[s] && context.plan.fed[s] > 0 && context.plan.plain[s];
  }
  return n;
}

Verdict check_batch(const Context& context) {
  Verdict verdict = start_verdict(Property::kBatch);
  const size_t n = context.scenario.sequences.size();
  const int dummies = std::min(context.scenario.max_rows - 1, 2);
  std::vector<bool> shared = context.plan.shared_step;
  std::vector<bool> fed(n);
  for (size_t s = 0; s < n; ++s) fed[s] = context.plan.fed[s] > 0 && context.plan.plain[s];
  const int n_shared = count_fed(context, shared);
  int n_placed = dummies > 0 ? count_fed(context, fed) : 0;
  if (n_shared == 0 && n_placed == 0) {
    return not_applicable(Property::kBatch,
                          "no sequence shares a step and max_rows 1 leaves no other row");
  }
  if (n_shared > 0) {
    const RunResult run = scenario_run(context);
    if (run.engine_failed) return engine_refused(Property::kBatch, run, "the scenario");
    if (!scenario_matches_solo(verdict, context, run, shared, "sharing its steps")) return verdict;
  }
  for (size_t s = 0; s < n && dummies > 0; ++s) {
    if (!fed[s]) continue;
    const int sequence = static_cast<int>(s);
    const std::span<const int32_t> tokens = fed_tokens(context, sequence);
    const SoloRun alone = run_solo(context, tokens, context.plan.chunks[s]);
    const SoloRun placed =
        run_solo(context, tokens, context.plan.chunks[s], dummies, context.digest ^ kDummySalt ^ s);
    for (const SoloRun* r : {&alone, &placed}) {
      if (r->run.engine_failed) {
        return engine_refused(Property::kBatch, r->run, "a solo run of s" + std::to_string(s));
      }
    }
    if (alone.pool_ran_dry() || placed.pool_ran_dry()) {
      --n_placed;
      continue;
    }
    if (!same_logits(verdict, context, sequence, alone.logits, "its solo run in row 0",
                     placed.logits,
                     "a run behind " + std::to_string(dummies) +
                         " decoding dummy sequences (later row and batch slot)")) {
      return verdict;
    }
  }
  if (n_shared == 0 && n_placed == 0) {
    return not_applicable(Property::kBatch, "every re-placed run ran the pool dry");
  }
  pass(verdict, std::to_string(n_shared) + " batched and " + std::to_string(n_placed) +
                    " re-placed sequences");
  return verdict;
}

Verdict check_reset(const Context& context) {
  Verdict verdict = start_verdict(Property::kReset);
  const size_t n = context.scenario.sequences.size();
  // A sequence started after a finish or a reset may land in a row (or a
  // position counter) an earlier sequence used.
  std::vector<bool> selected(n, false);
  int first_release = -1;
  for (size_t c = 0; c < context.scenario.calls.size(); ++c) {
    const Call& call = context.scenario.calls[c];
    if (call.kind == Call::Kind::kFinish || call.kind == Call::Kind::kReset) {
      if (first_release < 0) first_release = static_cast<int>(c);
    }
  }
  for (size_t s = 0; s < n; ++s) {
    selected[s] = first_release >= 0 && context.plan.start_call[s] > first_release;
  }
  const int count = count_fed(context, selected);
  if (count == 0) {
    return not_applicable(Property::kReset, "no fed sequence starts after a reset or finish");
  }
  const RunResult run = scenario_run(context);
  if (run.engine_failed) return engine_refused(Property::kReset, run, "the scenario");
  if (!scenario_matches_solo(verdict, context, run, selected, "started after a reset or finish")) {
    return verdict;
  }
  pass(verdict, std::to_string(count) + " sequences started after a reset or finish");
  return verdict;
}

Verdict check_compaction(const Context& context) {
  Verdict verdict = start_verdict(Property::kCompaction);
  const size_t n = context.scenario.sequences.size();
  std::vector<bool> selected(n, false);
  for (size_t c = 0; c < context.scenario.calls.size(); ++c) {
    const Call& call = context.scenario.calls[c];
    if (call.kind != Call::Kind::kFinish) continue;
    const int ci = static_cast<int>(c);
    for (size_t s = 0; s < n; ++s) {
      const bool started = context.plan.start_call[s] >= 0 && context.plan.start_call[s] < ci;
      const bool still = context.plan.end_call[s] < 0 || context.plan.end_call[s] > ci;
      if (started && still) selected[s] = true;
    }
  }
  const int count = count_fed(context, selected);
  if (count == 0) {
    return not_applicable(Property::kCompaction, "no fed sequence runs while another finishes");
  }
  const RunResult run = scenario_run(context);
  if (run.engine_failed) return engine_refused(Property::kCompaction, run, "the scenario");
  if (!scenario_matches_solo(verdict, context, run, selected, "running across a finish")) {
    return verdict;
  }
  pass(verdict, std::to_string(count) + " sequences running across a finish");
  return verdict;
}

// ---- P6 ---------------------------------------------------------------

// P6's comparison of one cached element (docs/TOLERANCE.md). base indexes
// element 0 of (layer, position, kv head) in the reference's [L][T][KVH][D]
// arrays. For q8_0 with the engine's scales, the bound is the computed part
// plus half a code of the stored scale, and that scale must itself be the
// block's amax / 127 within q8_scale_bound: a wrong scale makes every element
// of its block wrong, with the scale's error/bound as the ratio when larger.
struct ElementCheck {
  double cached = 0, exact = 0, bound = 0, ratio = 0;
  double scale = NAN, scale_exact = NAN;  // q8_0 only: stored and exact amax / 127
};
ElementCheck check_element(const CacheSnapshot& snap, const SequenceReference& reference, int kind,
                           size_t base, int pos, int g, int d) {
  const std::vector<double>& exact = kind == 0 ? reference.oracle.k : reference.oracle.v;
  ElementCheck c;
  c.cached = kind == 0 ? snap.k_at(pos, g, d) : snap.v_at(pos, g, d);
  c.exact = exact[base + size_t(d)];
  const bool scaled = snap.dtype == KvDtype::kQ8_0 && !snap.k_scales.empty();
  if (!scaled) {
    c.bound = (kind == 0 ? reference.bounds.k : reference.bounds.v)[base + size_t(d)];
    c.ratio = std::abs(c.cached - c.exact) / c.bound;
    return c;
  }
  const std::vector<double>& computed =
      kind == 0 ? reference.bounds.k_computed : reference.bounds.v_computed;
  const int block = d / int(kQ8Block), first = block * int(kQ8Block);
  const int end = std::min(snap.head_dim, first + int(kQ8Block));
  c.scale = kind == 0 ? snap.k_scale(pos, g, block) : snap.v_scale(pos, g, block);
  double amax = 0, computed_max = 0;
  for (int i = first; i < end; ++i) {
    amax = std::max(amax, std::abs(exact[base + size_t(i)]));
    computed_max = std::max(computed_max, computed[base + size_t(i)]);
  }
  c.scale_exact = amax / 127;
  c.bound = q8_element_bound(computed[base + size_t(d)], c.scale);
  c.ratio = std::max(std::abs(c.cached - c.exact) / c.bound,
                     std::abs(c.scale - c.scale_exact) / q8_scale_bound(computed_max, c.scale));
  if (std::isnan(c.scale)) c.ratio = INFINITY;
  return c;
}

// The snapshot index holding absolute position `pos`, or -1 when the
// snapshot does not hold it (a windowed layer's ring keeps the last W).
int snapshot_index(const CacheSnapshot& snap, int pos) {
  if (snap.positions.empty()) return pos < snap.length ? pos : -1;
  if (pos < snap.positions.front()) return -1;
  const int i = pos - snap.positions.front();
  return i < snap.length && snap.positions[size_t(i)] == pos ? i : -1;
}

// Why a snapshot's slots are not what a layer must hold after `held` tokens,
// or "": slot i holds position i for all of them (no positions listed), or
// the listed positions ascend one by one and end at held - 1, covering at
// least the window (the last min(held, W) positions) of a windowed layer.
std::string snapshot_coverage_error(const CacheSnapshot& snap, const Config& config, int layer,
                                    int held) {
  if (snap.positions.empty()) {
    if (snap.length == held) return "";
    return "the cache holds " + std::to_string(snap.length) + " positions, " +
           std::to_string(held) + " tokens were fed";
  }
  const int need = config.windowed(layer) ? std::min(held, config.sliding_window) : held;
  if (snap.positions.size() != size_t(snap.length) || snap.length < need ||
      snap.positions.back() != held - 1 || snap.positions.front() != held - snap.length) {
    return "the cache lists positions " +
           (snap.positions.empty() ? std::string("none")
                                   : std::to_string(snap.positions.front()) + ".." +
                                         std::to_string(snap.positions.back())) +
           " in " + std::to_string(snap.length) + " slots; after " + std::to_string(held) +
           " tokens it must hold positions " + std::to_string(held - need) + ".." +
           std::to_string(held - 1) + " at least";
  }
  for (int i = 1; i < snap.length; ++i) {
    if (snap.positions[size_t(i)] != snap.positions[size_t(i - 1)] + 1) {
      return "the cache lists positions out of order at slot " + std::to_string(i);
    }
  }
  return "";
}

// Per layer, the largest |cached - oracle| of K and V over position ranges,
// with its error/bound; "!" marks a range holding a wrong or non-finite slot.
std::string cache_table(const Engine& engine, SequenceId id, const SequenceReference& reference,
                        const Config& config, int length) {
  const int KVH = config.n_kv_heads, D = config.head_dim, T = reference.oracle.n_tokens;
  const int ranges = std::min(length, 8);
  std::ostringstream out;
  out << "largest |cached - oracle| (error/bound) per layer and position range; ! = wrong\n";
  out << "  layer";
  std::vector<std::pair<int, int>> spans;  // [range] first, last position
  for (int r = 0; r < ranges; ++r) {
    const int first = r * length / ranges, last = (r + 1) * length / ranges - 1;
    spans.push_back({first, last});
    out << " | pos " << first << ".." << last << " K, V";
  }
  out << "\n";
  for (int l = 0; l < config.n_layers; ++l) {
    const CacheSnapshot snap = engine.cache(id, l);
    out << "  " << l << "    ";
    for (const auto& [first, last] : spans) {
      for (int kind = 0; kind < 2; ++kind) {
        double worst_error = 0, worst_ratio = 0;
        bool bad = false;
        for (int pos = first; pos <= last && pos < T; ++pos) {
          const int index = snapshot_index(snap, pos);
          if (index < 0) continue;
          for (int g = 0; g < KVH; ++g) {
            for (int d = 0; d < D; ++d) {
              const size_t base =
                  ((size_t(l) * size_t(T) + size_t(pos)) * size_t(KVH) + size_t(g)) * size_t(D);
              const ElementCheck c = check_element(snap, reference, kind, base, index, g, d);
              const double error = std::abs(c.cached - c.exact);
              if (!std::isfinite(c.cached)) {
                bad = true;
                worst_error = INFINITY;
                worst_ratio = INFINITY;
                continue;
              }
              if (!(c.ratio <= 1.0)) bad = true;
              worst_error = std::max(worst_error, error);
              worst_ratio = std::max(worst_ratio, c.ratio);
            }
          }
        }
        char cell[48];
        std::snprintf(cell, sizeof(cell), "%s %.2e (%.2g)%s", kind == 0 ? " |" : ",", worst_error,
                      worst_ratio, bad ? "!" : "");
        out << cell;
      }
    }
    out << "\n";
  }
  return out.str();
}

Verdict check_cache_state(const Context& context) {
  Verdict verdict = start_verdict(Property::kCacheState);
  const Config& config = context.scenario.config;
  const int L = config.n_layers, KVH = config.n_kv_heads, D = config.head_dim;
  const size_t n = context.scenario.sequences.size();
  bool any_step = false;
  for (const Call& call : context.scenario.calls) any_step |= call.kind == Call::Kind::kStep;
  if (!any_step) return not_applicable(Property::kCacheState, "no step");

  // Per sequence and segment, the oracle of what it held then; a segment
  // with no tokens keeps the empty reference.
  const auto empty = std::make_shared<const SequenceReference>();
  std::vector<std::vector<std::shared_ptr<const SequenceReference>>> references(n);  // [s][segment]
  for (size_t s = 0; s < n; ++s) {
    for (const Segment& segment : context.plan.segments[s]) {
      references[s].push_back(segment.tokens.empty() && segment.history.empty()
                                  ? empty
                                  : reference_for(context, segment));
    }
  }

  double worst_ratio = 0;
  bool failed = false;
  const CallHook hook = [&](int call, const ScenarioRunner& runner) {
    for (size_t s = 0; s < n; ++s) {
      const int sequence = static_cast<int>(s);
      if (!runner.running(sequence)) continue;
      const int length = runner.held(sequence);
      const SequenceReference& reference =
          *references[s][size_t(context.plan.segment_at(sequence, call))];
      const int T = reference.oracle.n_tokens;
      Location where;
      where.call = call;
      where.sequence = sequence;
      for (int l = 0; l < L; ++l) {
        const CacheSnapshot snap = runner.engine().cache(runner.id(sequence), l);
        // A replayed history (erase, shift) is a list of cells, slot i the
        // reference's cell i; its positions are checked just below. Else
        // slot i holds position i, or the position a window's ring lists.
        const bool cells = !reference.positions.empty();
        const std::string coverage =
            cells ? (snap.length == length ? std::string()
                                           : "the cache holds " + std::to_string(snap.length) +
                                                 " cells, " + std::to_string(length) + " are held")
                  : snapshot_coverage_error(snap, config, l, length);
        if (!coverage.empty() || snap.n_kv_heads != KVH || snap.head_dim != D) {
          where.layer = l;
          where.position = std::min(snap.length, length);
          fail(verdict, where,
               "after call " + std::to_string(call) + ", s" + std::to_string(s) + " layer " +
                   std::to_string(l) + ": " +
                   (coverage.empty() ? std::string("the snapshot's shape is wrong") : coverage),
               "snapshot: length " + std::to_string(snap.length) + ", kv heads " +
                   std::to_string(snap.n_kv_heads) + ", head_dim " + std::to_string(snap.head_dim) +
                   "; expected " + std::to_string(length) + ", " + std::to_string(KVH) + ", " +
                   std::to_string(D) + "\n");
          failed = true;
          return false;
        }
        // An engine that reports the positions its cells hold (erase,
        // shift) must report the reference's.
        if (!reference.positions.empty() && !snap.positions.empty() &&
            snap.positions != reference.positions) {
          where.layer = l;
          size_t at = 0;
          while (at < snap.positions.size() && at < reference.positions.size() &&
                 snap.positions[at] == reference.positions[at]) {
            ++at;
          }
          where.position = static_cast<int>(at);
          fail(verdict, where,
               "after call " + std::to_string(call) + ", s" + std::to_string(s) + " cell " +
                   std::to_string(at) + ": the cache reports the wrong position",
               "the engine's snapshot positions differ from the replay's from cell " +
                   std::to_string(at) + "\n");
          failed = true;
          return false;
        }
        int first_bad = -1, last_bad = -1, bad_head = -1, bad_dim = -1, bad_kind = 0;
        ElementCheck bad;
        // Slot i holds reference entry pos: i itself (no positions listed, or
        // a replayed history's cells), or the ring's listed positions[i].
        for (int i = 0; i < snap.length; ++i) {
          const int pos = cells || snap.positions.empty() ? i : snap.positions[size_t(i)];
          if (pos >= T) break;
          for (int g = 0; g < KVH; ++g) {
            const size_t base =
                ((size_t(l) * size_t(T) + size_t(pos)) * size_t(KVH) + size_t(g)) * size_t(D);
            for (int d = 0; d < D; ++d) {
              for (int kind = 0; kind < 2; ++kind) {
                const ElementCheck c = check_element(snap, reference, kind, base, i, g, d);
                if (std::isfinite(c.cached) && c.ratio <= 1.0) {
                  worst_ratio = std::max(worst_ratio, c.ratio);
                  continue;
                }
                if (first_bad < 0) {
                  first_bad = pos, bad_head = g, bad_dim = d, bad_kind = kind;
                  bad = c;
                }
                last_bad = pos;
              }
            }
          }
        }
        if (first_bad < 0) continue;
        where.layer = l;
        where.kv_head = bad_head;
        where.position = first_bad;
        where.first_bad_position = first_bad;
        where.last_bad_position = last_bad;
        std::ostringstream detail;
        detail << "after call " << call << ", sequence s" << s << " with " << length
               << " positions cached\n"
               << "first wrong element: layer " << l << " kv head " << bad_head << " position "
               << first_bad << " dim " << bad_dim << " " << (bad_kind == 0 ? "K" : "V")
               << ": cached " << format_double(bad.cached) << " oracle " << format_double(bad.exact)
               << " bound " << format_double(bad.bound)
               << (std::isfinite(bad.cached) ? "" : " (non-finite: a poisoned slot was read)");
        if (!std::isnan(bad.scale_exact)) {
          detail << "\nits q8_0 block scale: stored " << format_double(bad.scale)
                 << ", the exact block's amax / 127 " << format_double(bad.scale_exact);
        }
        detail << "\nwrong positions in layer " << l << ": " << first_bad << ".." << last_bad
               << "\n"
               << cache_table(runner.engine(), runner.id(sequence), reference, config, length);
        fail(verdict, where,
             "after call " + std::to_string(call) + ", s" + std::to_string(s) + " layer " +
                 std::to_string(l) + " kv head " + std::to_string(bad_head) + ": cached " +
                 (bad_kind == 0 ? "K" : "V") + " wrong at positions " + std::to_string(first_bad) +
                 ".." + std::to_string(last_bad),
             detail.str());
        verdict.worst_ratio = std::isfinite(bad.cached) ? bad.ratio : INFINITY;
        failed = true;
        return false;
      }
    }
    return true;
  };
  ScenarioRunner runner(context.scenario, config, context.weights, context.factory);
  const RunResult run = runner.run(hook);
  if (failed) return verdict;
  if (run.engine_failed) return engine_refused(Property::kCacheState, run, "the scenario");
  verdict.worst_ratio = worst_ratio;
  pass(verdict, "worst error/bound " + format_double(worst_ratio));
  return verdict;
}

// ---- P7 ---------------------------------------------------------------

// The MHA twin of a GQA model: KV head g's rows of wk/wv (and bk/bv) copied to
// query heads g*group .. g*group+group-1 (repeat_interleave).
std::pair<Config, Weights> mha_twin(const Config& config, const Weights& weights) {
  Config mha = config;
  mha.n_kv_heads = config.n_heads;
  Weights twin = weights;
  const size_t D = size_t(config.head_dim), E = size_t(config.d_model);
  const int group = config.group();
  const auto repeat = [&](const std::vector<float>& source, size_t row_width) {
    std::vector<float> out;  // [H*D][row_width]
    out.reserve(size_t(config.n_heads) * D * row_width);
    for (int h = 0; h < config.n_heads; ++h) {
      const size_t g = size_t(h / group);
      out.insert(out.end(), source.begin() + std::ptrdiff_t(g * D * row_width),
                 source.begin() + std::ptrdiff_t((g + 1) * D * row_width));
    }
    return out;
  };
  for (LayerWeights& layer : twin.layers) {
    layer.wk = repeat(layer.wk, E);
    layer.wv = repeat(layer.wv, E);
    if (!layer.bk.empty()) layer.bk = repeat(layer.bk, 1);
    if (!layer.bv.empty()) layer.bv = repeat(layer.bv, 1);
  }
  return {mha, std::move(twin)};
}

Verdict check_gqa(const Context& context) {
  Verdict verdict = start_verdict(Property::kGqa);
  const Config& config = context.scenario.config;
  if (config.n_kv_heads == config.n_heads) {
    return not_applicable(Property::kGqa, "the config is MHA (n_kv_heads == n_heads)");
  }
  const auto [mha_config, mha_weights] = mha_twin(config, context.weights);
  const RunResult gqa = scenario_run(context);
  if (gqa.engine_failed) return engine_refused(Property::kGqa, gqa, "the scenario");
  ScenarioRunner twin_runner(context.scenario, mha_config, mha_weights, context.factory);
  const RunResult mha = twin_runner.run();
  if (mha.engine_failed) return engine_refused(Property::kGqa, mha, "the MHA twin");
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    if (!same_logits(verdict, context, static_cast<int>(s), mha.logits[s],
                     "the MHA twin (" + std::to_string(config.n_heads) + " KV heads)",
                     gqa.logits[s], "GQA (" + std::to_string(config.n_kv_heads) + " KV heads)",
                     reused_in_either(gqa, mha, s))) {
      return verdict;
    }
  }
  pass(verdict, "GQA equals its MHA twin");
  return verdict;
}

// ---- P8 ---------------------------------------------------------------

Verdict check_determinism(const Context& context) {
  Verdict verdict = start_verdict(Property::kDeterminism);
  const RunResult first = scenario_run(context);
  const RunResult second = run_scenario(context.scenario, context.weights, context.factory);
  if (first.engine_failed || second.engine_failed) {
    return engine_refused(Property::kDeterminism, first.engine_failed ? first : second,
                          first.engine_failed ? "the first run" : "the second run");
  }
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    if (!same_logits(verdict, context, static_cast<int>(s), first.logits[s], "the first run",
                     second.logits[s], "the second run", reused_in_either(first, second, s))) {
      return verdict;
    }
  }
  pass(verdict, "two runs gave the same bits");
  return verdict;
}

// ---- P9 ---------------------------------------------------------------

std::string underivable_arithmetic(const ArithmeticTraits& a);

Verdict check_capacity(const Context& context) {
  Verdict verdict = start_verdict(Property::kCapacity);
  if (context.scenario.prefix_cache) {
    // Its probes feed sequences directly and compare every logit; a prefix
    // hit leaves some uncomputed (P15 checks those sequences).
    return not_applicable(Property::kCapacity,
                          "the scenario has a prefix cache (its probes would take hits)");
  }
  if (context.scenario.pool_blocks > 0) {
    // Its probes would meet the pool's refusals before the capacity's.
    return not_applicable(Property::kCapacity, "the scenario's pool (pool_blocks " +
                                                   std::to_string(context.scenario.pool_blocks) +
                                                   ") may run dry before the capacity is reached");
  }
  // "Others intact" compares within 2B where the batch promise is bounded; B
  // exists only for the arithmetic the tolerance derives. Without it only
  // the refusals themselves are checked.
  const std::string no_bound = context.subject.traits.invariance.batch == Invariance::kBounded
                                   ? underivable_arithmetic(context.subject.traits.arithmetic)
                                   : std::string();
  const Scenario& scenario = context.scenario;
  const size_t n = scenario.sequences.size();
  const int capacity = scenario.capacity;
  ScenarioRunner runner(scenario, scenario.config, context.weights, context.factory);
  const RunResult run = runner.run();
  Engine& engine = runner.engine();
  if (engine.options().pool_blocks > 0) {
    // A backend option (cpu?paged=B&pool=N) sized a pool the scenario does not.
    return not_applicable(Property::kCapacity,
                          "the engine's pool (pool_blocks " +
                              std::to_string(engine.options().pool_blocks) +
                              ", a backend option) may run dry before the capacity is reached");
  }
  if (run.engine_failed) return engine_refused(Property::kCapacity, run, "the scenario");
  if (engine.options().prefix_cache) {
    // A backend option (cpu?paged=B&prefix=1) gave the engine a prefix cache
    // the scenario does not name: the probes would take hits.
    return not_applicable(Property::kCapacity,
                          "the engine has a prefix cache (its probes would take hits)");
  }
  SplitMix64 rng(context.digest ^ kCapacitySalt);

  // What each probed sequence has been through: the scenario's sequences that
  // still run, or one fresh probe sequence when none does.
  struct Probe {
    int sequence;  // scenario index, or -1 for the fresh probe
    SequenceId id;
    std::vector<int32_t> tokens;  // fed so far
    std::vector<int> chunks;
    std::vector<float> logits;  // [position][V]
    int32_t next_token;
  };
  std::vector<Probe> probes;
  for (size_t s = 0; s < n; ++s) {
    const int sequence = static_cast<int>(s);
    if (!runner.running(sequence) || !context.plan.plain[s]) continue;
    const std::span<const int32_t> tokens = fed_tokens(context, sequence);
    probes.push_back({sequence, runner.id(sequence),
                      std::vector<int32_t>(tokens.begin(), tokens.end()), context.plan.chunks[s],
                      runner.logits(sequence),
                      static_cast<int32_t>(rng.below(uint64_t(context.vocab)))});
  }
  if (probes.empty()) {
    for (size_t s = 0; s < n; ++s) {
      if (runner.running(static_cast<int>(s))) {
        return not_applicable(Property::kCapacity,
                              "only forked or truncated sequences run after the scenario");
      }
    }
    try {
      probes.push_back({-1,
                        engine.start(),
                        {},
                        {},
                        {},
                        static_cast<int32_t>(rng.below(uint64_t(context.vocab)))});
    } catch (const EngineError& e) {
      Location where;
      where.call = static_cast<int>(scenario.calls.size());
      fail(verdict, where, "starting a probe sequence after the scenario was refused",
           std::string("EngineError: ") + e.what() + "\n");
      return verdict;
    }
  }
  const auto name = [](const Probe& p) {
    return p.sequence >= 0 ? "s" + std::to_string(p.sequence) : std::string("the probe sequence");
  };

  int call = static_cast<int>(scenario.calls.size());  // probes are numbered on
  std::vector<float> logits;
  for (size_t i = 0; i < probes.size(); ++i, ++call) {
    const Probe& target = probes[i];
    const int length = static_cast<int>(target.tokens.size());
    std::vector<int32_t> overflow;  // [capacity - length + 1]
    for (int j = 0; j < capacity - length + 1; ++j) {
      overflow.push_back(static_cast<int32_t>(rng.below(uint64_t(context.vocab))));
    }
    std::vector<BatchEntry> batch;
    std::string companion;
    for (const Probe& other : probes) {
      if (&other == &target || static_cast<int>(other.tokens.size()) >= capacity) continue;
      batch.push_back({other.id, std::span<const int32_t>(&other.next_token, 1)});
      companion = " batched after a valid decode of " + name(other);
      break;
    }
    batch.push_back({target.id, overflow});
    Location where;
    where.call = call;
    where.sequence = target.sequence;
    where.position = capacity;
    const std::string what = "probe call " + std::to_string(call) + ": " +
                             std::to_string(overflow.size()) + " tokens for " + name(target) +
                             " at position " + std::to_string(length) + " (capacity " +
                             std::to_string(capacity) + ")" + companion;
    try {
      engine.step(batch, logits);
      fail(verdict, where,
           name(target) + ": a step past the capacity by 1 was accepted, not refused",
           what + "\nexpected EngineError kCapacity; the engine returned logits\n");
      return verdict;
    } catch (const EngineError& e) {
      if (e.kind() != EngineError::Kind::kCapacity) {
        fail(verdict, where,
             name(target) + ": a step past the capacity was refused with the wrong kind",
             what + "\nEngineError kind " + std::to_string(static_cast<int>(e.kind())) + ": " +
                 e.what() + "\n");
        return verdict;
      }
    }
    for (const Probe& p : probes) {
      const int now = engine.length(p.id);
      if (now != static_cast<int>(p.tokens.size())) {
        where.sequence = p.sequence;
        where.position = now;
        fail(verdict, where,
             name(p) + ": the refused step changed its length from " +
                 std::to_string(p.tokens.size()) + " to " + std::to_string(now),
             what + "\n");
        return verdict;
      }
    }
  }

  // Every sequence goes on as if nothing had happened.
  int continued = 0;
  for (Probe& p : probes) {
    if (static_cast<int>(p.tokens.size()) >= capacity) continue;
    const BatchEntry entry{p.id, std::span<const int32_t>(&p.next_token, 1)};
    Location where;
    where.call = call;
    where.sequence = p.sequence;
    where.position = static_cast<int>(p.tokens.size());
    try {
      engine.step(std::span<const BatchEntry>(&entry, 1), logits);
    } catch (const EngineError& e) {
      fail(verdict, where, name(p) + ": a valid decode after the refused steps was refused",
           std::string("EngineError: ") + e.what() + "\n");
      return verdict;
    }
    ++call;
    ++continued;
    p.tokens.push_back(p.next_token);
    p.chunks.push_back(1);
    p.logits.insert(p.logits.end(), logits.begin(), logits.end());
    const SoloRun solo = run_solo(context, p.tokens, p.chunks);
    if (solo.run.engine_failed) {
      return engine_refused(Property::kCapacity, solo.run, "the solo run of " + name(p));
    }
    if (!no_bound.empty()) continue;
    // Solo vs beside the refused sequences: a placement, so the batch promise.
    const std::optional<size_t> at =
        first_difference(context, context.subject.traits.invariance.batch, p.tokens, solo.logits,
                         p.logits, &verdict.worst_ratio);
    if (!at) continue;
    where.position = static_cast<int>(*at / size_t(context.vocab));
    std::ostringstream detail;
    detail << name(p) << " after the refused steps and one more token, vs its solo run ("
           << describe_chunks(p.chunks) << "): first difference at position " << where.position
           << " vocab " << *at % size_t(context.vocab) << "\n";
    if (*at < solo.logits.size() && *at < p.logits.size()) {
      detail << "  solo: " << float_with_bits(solo.logits[*at])
             << "\n  after the refusal: " << float_with_bits(p.logits[*at]) << "\n";
    }
    fail(
        verdict, where,
        name(p) + " position " + std::to_string(where.position) + ": " +
            disagreement(solo.logits, "its solo run", p.logits, "the run after the refused steps",
                         *at, where.call, "logits after the refused step differ from its solo run"),
        detail.str());
    return verdict;
  }
  pass(verdict, std::to_string(probes.size()) + " refusals, " + std::to_string(continued) +
                    " sequences continued" +
                    (no_bound.empty() ? std::string()
                                      : " (not compared with their solo runs: no bound is "
                                        "derived yet for " +
                                            no_bound + ")"));
  return verdict;
}

// ---- P10 --------------------------------------------------------------

// Both engines keep within B of the exact logits (each meets the per-kernel
// error model the bound is derived from), so by the triangle inequality they
// are within 2 B of each other, whatever their reduction orders.
Verdict check_cross_engine(const Context& context) {
  Verdict verdict = start_verdict(Property::kCrossEngine);
  const EngineUnderTest* reference = context.subject.reference.get();
  if (reference == nullptr) {
    return not_applicable(Property::kCrossEngine, "no reference engine given (--reference)");
  }
  if (const std::string why = traits_exclude(reference->traits, context.scenario); !why.empty()) {
    return not_applicable(Property::kCrossEngine, "the reference engine lacks " + why);
  }
  const RunResult run = scenario_run(context);
  if (run.engine_failed) return engine_refused(Property::kCrossEngine, run, "the scenario");
  const RunResult other = run_scenario(context.scenario, context.weights, reference->factory);
  if (other.engine_failed) {
    return engine_refused(Property::kCrossEngine, other, "the scenario on the reference engine");
  }
  int compared = 0;
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    // The 2B bound is derived from the stream, which is the content only for
    // a plain sequence; a forked or truncated one is P1's, P11's and P12's.
    if (context.plan.fed[s] == 0 || !context.plan.plain[s]) continue;
    ++compared;
    const std::span<const int32_t> tokens = fed_tokens(context, static_cast<int>(s));
    std::vector<float> mine = run.logits[s], theirs = other.logits[s];  // [stream index][V]
    const std::vector<bool> skipped = reused_in_either(run, other, s);
    skip_rows(mine, skipped, size_t(context.vocab));
    skip_rows(theirs, skipped, size_t(context.vocab));
    const std::optional<size_t> at =
        first_difference(context, Invariance::kBounded, tokens, theirs, mine, &verdict.worst_ratio);
    if (!at) continue;
    const size_t V = size_t(context.vocab);
    Location where;
    where.sequence = static_cast<int>(s);
    where.position = static_cast<int>(*at / V);
    where.call = context.plan.call_of_position[s][size_t(where.position)];
    std::ostringstream detail;
    detail << "s" << s << " position " << where.position << " vocab " << *at % V << "\n";
    if (*at < other.logits[s].size() && *at < run.logits[s].size()) {
      detail << "  reference (" << reference->backend
             << "): " << float_with_bits(other.logits[s][*at])
             << "\n  engine: " << float_with_bits(run.logits[s][*at]) << "\n";
    }
    fail(verdict, where,
         "s" + std::to_string(s) + " position " + std::to_string(where.position) + ": " +
             disagreement(theirs, "the reference engine", mine, "the engine", *at, where.call,
                          "logits differ from the reference engine by more than 2B"),
         detail.str());
    return verdict;
  }
  if (compared == 0) return not_applicable(Property::kCrossEngine, "no plain sequence is fed");
  pass(verdict, std::to_string(compared) + " sequences within 2B of " + reference->backend +
                    ", worst |difference|/2B " + format_double(verdict.worst_ratio));
  return verdict;
}

// ---- P11, P12: replays that never shared and never rolled back ----------

// Each selected sequence's logits, where its final content still holds the
// token it was fed, against a solo run of that content on a fresh engine fed
// in the same chunks (the parent's cut at n for a fork's prefix, the chunks
// left after a truncation): never shared (P11), never fed what was
// forgotten (P12), never took a prefix from the cache (P15: a warm hit
// against a cold run, SGLang #34683). The oracle of all is the content alone.
Verdict check_replay(const Context& context, Property property) {
  Verdict verdict = start_verdict(property);
  const SchedulePlan& plan = context.plan;
  const size_t n = context.scenario.sequences.size();
  const size_t V = size_t(context.vocab);
  const bool sharing = property == Property::kSharing;
  const bool prefix = property == Property::kPrefix;
  if (prefix && !context.scenario.prefix_cache) {
    return not_applicable(property, "the scenario has no prefix cache (prefix_cache 0)");
  }
  // P15 selects by what the run did: which sequences the engine says hit.
  RunResult run;
  if (prefix) {
    run = scenario_run(context);
    if (run.engine_failed) return engine_refused(property, run, "the scenario");
  }
  std::vector<size_t> selected;
  for (size_t s = 0; s < n; ++s) {
    const bool involved =
        prefix ? s < run.reused.size() && std::find(run.reused[s].begin(), run.reused[s].end(),
                                                    true) != run.reused[s].end()
               : (sharing ? plan.forked[s] || plan.forked_from[s] >= 0 : plan.truncated[s]);
    // An erased or shifted sequence's cache is not a replay of its content
    // (the kept K/V saw the erased context): P1 and P6 check it instead.
    if (plan.shifted[s]) continue;
    const bool fed_kept =
        std::any_of(plan.content_stream[s].begin(), plan.content_stream[s].end(),
                    [&](int k) { return k >= 0 && !reused_at(run, s, size_t(k)); });
    if (involved && fed_kept) selected.push_back(s);
  }
  if (selected.empty()) {
    return not_applicable(property, prefix    ? "no sequence's first chunk hit the prefix cache"
                                    : sharing ? "no fed sequence forks or is forked"
                                              : "no truncated sequence keeps a token it was fed");
  }
  if (!prefix) {
    run = scenario_run(context);
    if (run.engine_failed) return engine_refused(property, run, "the scenario");
  }
  const Invariance invariance = invariance_for(context, property);
  for (const size_t s : selected) {
    const std::vector<int32_t>& content = plan.content[s];
    const SoloRun solo = run_solo(context, content, plan.content_chunks[s]);
    if (solo.run.engine_failed) {
      return engine_refused(property, solo.run, "the replay of s" + std::to_string(s));
    }
    if (solo.pool_ran_dry()) continue;
    // The scenario's logits at the positions it fed itself; the inherited
    // prefix has none and takes the replay's, and so do reused tokens.
    std::vector<float> got = solo.logits;  // [position][V]
    for (size_t p = 0; p < content.size(); ++p) {
      const int k = plan.content_stream[s][p];
      if (k < 0 || reused_at(run, s, size_t(k))) continue;
      std::copy_n(run.logits[s].begin() + std::ptrdiff_t(size_t(k) * V), V,
                  got.begin() + std::ptrdiff_t(p * V));
    }
    const std::optional<size_t> at =
        first_difference(context, invariance, content, solo.logits, got, &verdict.worst_ratio);
    if (!at) continue;
    Location where;
    where.sequence = static_cast<int>(s);
    where.position = static_cast<int>(*at / V);
    // A position inherited from a parent was fed by no call of this
    // sequence: only a non-finite replay value fails there.
    const int k = plan.content_stream[s][size_t(where.position)];
    where.call = k >= 0 ? plan.call_of_position[s][size_t(k)] : -1;
    const std::string replay = prefix    ? "a cold replay (fresh engine, nothing cached)"
                               : sharing ? "a replay that never shared storage"
                                         : "a replay that never fed the forgotten tokens";
    std::ostringstream detail;
    detail << "s" << s << " position " << where.position << " vocab " << *at % V << " (fed by call "
           << where.call << ")\n  " << replay << " (chunks "
           << describe_chunks(plan.content_chunks[s]) << "): " << float_with_bits(solo.logits[*at])
           << "\n  the scenario: " << float_with_bits(got[*at]) << "\n";
    if (plan.forked_from[s] >= 0)
      detail << "  s" << s << " was forked from s" << plan.forked_from[s] << "\n";
    if (invariance == Invariance::kBounded) detail << "  (compared within 2B)\n";
    fail(verdict, where,
         "s" + std::to_string(s) + " position " + std::to_string(where.position) + ": " +
             disagreement(solo.logits, replay, got, "the scenario", *at, where.call,
                          "logits differ from " + replay),
         detail.str());
    return verdict;
  }
  pass(verdict,
       std::to_string(selected.size()) + (prefix ? " prefix-cache hits equal their cold replays"
                                                 : " sequences equal their replays"));
  return verdict;
}

// ---- P13 --------------------------------------------------------------

// What is wrong with the pool after a call, or "".
std::string pool_problem(const PoolReport& r, const Scenario& scenario,
                         const ScenarioRunner& runner, int call) {
  const bool last_call = call == static_cast<int>(scenario.calls.size()) - 1;
  const bool flushed = scenario.calls[size_t(call)].kind == Call::Kind::kFlush;
  const auto text = [](auto... parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
  };
  if (r.block_size != scenario.block_size) {
    return text("the pool reports block size ", r.block_size, ", the scenario asks for ",
                scenario.block_size);
  }
  if (r.free + r.used + r.cached != r.total || r.free < 0 || r.used < 0 || r.cached < 0) {
    return text("free ", r.free, " + used ", r.used, " + cached ", r.cached, " != total ", r.total);
  }
  if (static_cast<int>(r.refcounts.size()) != r.total) {
    return text(r.refcounts.size(), " reference counts for ", r.total, " blocks");
  }
  std::vector<int> holders(size_t(r.total), 0);  // [block] tables holding it
  for (const auto& [id, blocks] : r.tables) {
    for (const int b : blocks) {
      if (b < 0 || b >= r.total) return text("sequence ", id, "'s table holds block ", b);
      ++holders[size_t(b)];
    }
  }
  int held_blocks = 0;
  for (int b = 0; b < r.total; ++b) {
    if (r.refcounts[size_t(b)] != holders[size_t(b)]) {
      return text("block ", b, ": reference count ", r.refcounts[size_t(b)], ", held by ",
                  holders[size_t(b)], " block tables");
    }
    held_blocks += holders[size_t(b)] > 0;
  }
  if (r.used != held_blocks) {
    return text("used ", r.used, " blocks, but the tables hold ", held_blocks);
  }
  int running = 0;
  for (size_t s = 0; s < scenario.sequences.size(); ++s) {
    const int sequence = static_cast<int>(s);
    if (!runner.running(sequence)) continue;
    ++running;
    const int need = (runner.held(sequence) + r.block_size - 1) / r.block_size;
    const auto table = std::find_if(r.tables.begin(), r.tables.end(),
                                    [&](const auto& t) { return t.first == runner.id(sequence); });
    if (table == r.tables.end()) return text("s", s, " has no block table");
    if (static_cast<int>(table->second.size()) != need) {
      return text("s", s, " holds ", runner.held(sequence), " tokens in ", table->second.size(),
                  " blocks; ", need, " blocks of ", r.block_size, " hold them");
    }
  }
  if (static_cast<int>(r.tables.size()) != running) {
    return text(r.tables.size(), " block tables for ", running, " running sequences");
  }
  if (last_call && running == 0 && r.used != 0) {
    return text("every sequence has ended, yet ", r.used, " blocks are used");
  }
  if (flushed && running == 0 && r.free != r.total) {
    return text("the prefix cache was flushed with no sequence running, yet only ", r.free, " of ",
                r.total, " blocks are free (", r.cached, " cached, ", r.used, " used)");
  }
  if (flushed && r.cached != 0) {
    return text("the prefix cache was flushed, yet ", r.cached, " blocks are cached");
  }
  return "";
}

// Runs the scenario once and asks `problem_after` after every call; the
// first problem fails `property` with `rule` as the detail.
Verdict check_after_every_call(
    Property property, const Context& context,
    const std::function<std::string(int call, const ScenarioRunner&)>& problem_after,
    const std::string& rule, const std::string& passed) {
  Verdict verdict = start_verdict(property);
  const Scenario& scenario = context.scenario;
  const CallHook hook = [&](int call, const ScenarioRunner& runner) {
    const std::string problem = problem_after(call, runner);
    if (problem.empty()) return true;
    Location where;
    where.call = call;
    fail(verdict, where, "after call " + std::to_string(call) + ": " + problem, rule);
    return false;
  };
  ScenarioRunner runner(scenario, scenario.config, context.weights, context.factory);
  const RunResult run = runner.run(hook);
  if (!verdict.passed) return verdict;
  if (run.engine_failed) return engine_refused(property, run, "the scenario");
  pass(verdict, passed);
  return verdict;
}

Verdict check_pool(const Context& context) {
  const Scenario& scenario = context.scenario;
  if (scenario.block_size == 0) {
    return not_applicable(Property::kPool, "the scenario stores contiguously (block_size 0)");
  }
  return check_after_every_call(
      Property::kPool, context,
      [&](int call, const ScenarioRunner& runner) {
        return pool_problem(runner.engine().pool(), scenario, runner, call);
      },
      "pool accounting (docs/OPERATIONS.md): free + used + cached == total, each block's "
      "reference count == the block tables holding it, each table ceil(length / B) blocks, "
      "nothing used once every sequence has ended, nothing cached after a flush and the "
      "whole pool free after a flush with no sequence running\n",
      "the pool added up after " + std::to_string(scenario.calls.size()) + " calls");
}

// ---- P14 --------------------------------------------------------------

Verdict check_poison(const Context& context) {
  const Scenario& scenario = context.scenario;
  const bool releases =
      std::any_of(scenario.calls.begin(), scenario.calls.end(), [](const Call& c) {
        return c.kind == Call::Kind::kFinish || c.kind == Call::Kind::kReset ||
               c.kind == Call::Kind::kFork || c.kind == Call::Kind::kTruncate ||
               c.kind == Call::Kind::kFlush || c.kind == Call::Kind::kErase;
      });
  // A prefix cache (or a pool that runs dry) also frees blocks inside steps:
  // evictions.
  if (!releases && !scenario.prefix_cache) {
    return not_applicable(Property::kPoison, "no finish, reset, fork or truncation moves storage");
  }
  return check_after_every_call(
      Property::kPoison, context,
      [](int, const ScenarioRunner& runner) { return runner.engine().unheld_storage_check(); },
      "storage that no sequence holds must be poisoned again (NaN) when it is freed "
      "(finish, reset, a block's last reference, a truncated tail, an eviction or flush of "
      "a cached block), so that a later read past a length shows; a cached block keeps its "
      "data (docs/OPERATIONS.md)\n",
      "unheld storage poisoned after every call");
}

// What a property needs beyond the scenario's own calls, or nullptr.
const char* operation_needed(const EngineTraits& traits, Property property) {
  const OperationTraits& op = traits.operations;
  switch (property) {
    case Property::kBatch:
      return op.multi_sequence_step ? nullptr : "several sequences in one step";
    case Property::kCompaction:
      return op.finish ? nullptr : "finish";
    case Property::kCacheState:
      return op.cache_snapshot ? nullptr : "cache snapshots";
    case Property::kCapacity:
      return op.capacity_refusal ? nullptr : "a capacity refusal";
    case Property::kSharing:
      return op.fork ? nullptr : "fork";
    case Property::kRollback:
      return op.truncate ? nullptr : "truncate";
    case Property::kPool:
      return op.paged && op.pool_report ? nullptr : "a pool report of paged storage";
    case Property::kPoison:
      return op.storage_check ? nullptr : "a check of unheld storage";
    case Property::kPrefix:
      return op.prefix_cache && op.paged ? nullptr : "a prefix cache";
    default:
      return nullptr;
  }
}

bool needs_bound(Property property) {
  switch (property) {
    case Property::kOracle:
    case Property::kCacheState:
    case Property::kCrossEngine:
      return true;
    default:
      return false;
  }
}

// The error models the tolerance derives today (docs/TOLERANCE.md).
std::string underivable_arithmetic(const ArithmeticTraits& a) {
  if (a.accumulation != Precision::kF32) {
    return std::string(precision_name(a.accumulation)) + " accumulation";
  }
  if (a.activations != Precision::kF32) {
    return std::string(precision_name(a.activations)) + " activations";
  }
  if (a.queries_rounded_to_kv_dtype) return "queries rounded to the cache dtype";
  return "";
}

}  // namespace

std::string_view property_name(Property p) {
  const int i = static_cast<int>(p);
  return i >= 0 && i < kPropertyCount ? kInfo[size_t(i)].name : std::string_view("unknown");
}

std::string_view property_label(Property p) {
  const int i = static_cast<int>(p);
  return i >= 0 && i < kPropertyCount ? kInfo[size_t(i)].label : std::string_view("P?");
}

std::optional<Property> parse_property(std::string_view name) {
  for (int i = 0; i < kPropertyCount; ++i) {
    if (kInfo[size_t(i)].name == name || kInfo[size_t(i)].label == name) {
      return static_cast<Property>(i);
    }
  }
  return std::nullopt;
}

// The property's own check, once the scenario applies to the engine.
static Verdict run_property(Property property, const Scenario& scenario,
                            const EngineUnderTest& subject, std::optional<RunResult> probe_run,
                            bool first_run_probes) {
  try {
    const std::shared_ptr<const Weights> weights = scenario_weights(scenario);
    const Context context{scenario,
                          subject,
                          subject.factory,
                          *weights,
                          plan_schedule(scenario),
                          scenario_digest(scenario),
                          scenario.config.vocab,
                          std::move(probe_run),
                          first_run_probes};
    switch (property) {
      case Property::kOracle:
        return check_oracle(context);
      case Property::kChunking:
        return check_chunking(context);
      case Property::kBatch:
        return check_batch(context);
      case Property::kReset:
        return check_reset(context);
      case Property::kCompaction:
        return check_compaction(context);
      case Property::kCacheState:
        return check_cache_state(context);
      case Property::kGqa:
        return check_gqa(context);
      case Property::kDeterminism:
        return check_determinism(context);
      case Property::kCapacity:
        return check_capacity(context);
      case Property::kCrossEngine:
        return check_cross_engine(context);
      case Property::kSharing:
      case Property::kRollback:
        return check_replay(context, property);
      case Property::kPool:
        return check_pool(context);
      case Property::kPoison:
        return check_poison(context);
      case Property::kPrefix:
        return check_replay(context, property);
      case Property::kCount:
        break;
    }
  } catch (const EngineError& e) {
    // Only a call outside the scenario (a cache snapshot, a length) can
    // throw through; the engine must answer those for a running sequence.
    Verdict verdict = start_verdict(property);
    fail(verdict, Location{}, "the engine refused a query about a running sequence",
         std::string("EngineError: ") + e.what() + "\n");
    return verdict;
  } catch (const InputError& e) {
    // The scenario validated and the traits accept it, so an engine that
    // will not even be built for it fails the property.
    Verdict verdict = start_verdict(property);
    fail(verdict, Location{}, "the engine could not be built for a valid scenario",
         std::string("InputError: ") + e.what() + "\n");
    return verdict;
  } catch (const std::exception& e) {
    // Foreign engines throw whatever they throw; on a valid call that is a
    // failure of the engine, with a case file like any other.
    Verdict verdict = start_verdict(property);
    fail(verdict, Location{}, std::string("the engine threw: ") + e.what(),
         std::string("exception: ") + e.what() + "\n");
    return verdict;
  }
  return not_applicable(property, "unknown property");
}

namespace {

// check_property, given the run of `scenario` where one was already made
// (`known_run`: the calls before a refusal, as the probe ran them).
Verdict check_probed(Property property, const Scenario& scenario, const EngineUnderTest& subject,
                     std::optional<RunResult> known_run) {
  if (const std::string error = scenario.validate(); !error.empty()) {
    return not_applicable(property, "invalid scenario: " + error);
  }
  if (const std::string why = traits_exclude(subject.traits, scenario); !why.empty()) {
    return not_applicable(property, "the engine lacks " + why);
  }
  if (std::string why = never_applicable(property, subject, scenario.model.get()); !why.empty()) {
    return not_applicable(property, std::move(why));
  }
  // A refused step ends the scenario there: the run of the calls before it
  // is `stopped` (which stopped at the refusal), neither probed nor run again.
  const auto check_before_refusal = [&](RunResult stopped) {
    Scenario before = scenario;
    before.calls.resize(size_t(stopped.refused_call));
    stopped.refused = false;
    stopped.refused_call = -1;
    stopped.error_message.clear();
    Verdict verdict = check_probed(property, before, subject, std::move(stopped));
    // No call index here: the campaign groups verdicts by their text.
    const std::string note =
        " (the pool ran dry and refused a step, changing nothing; the calls before it were "
        "checked)";
    if (verdict.applicable && verdict.passed) verdict.summary += note;
    return verdict;
  };
  // A pool sized by the scenario may run dry. The runner checked that the
  // refusal changed nothing; the properties then check the calls before it
  // (docs/OPERATIONS.md, "Small pools"). P1's first run is the scenario's,
  // so it is the probe; other properties are probed first.
  const bool may_run_dry = !known_run && (scenario.pool_blocks > 0 || subject.forces_pool);
  const bool first_run_probes = may_run_dry && property == Property::kOracle;
  std::optional<RunResult> failed_probe;
  if (may_run_dry && !first_run_probes) {
    try {
      RunResult probe = run_scenario(scenario, *scenario_weights(scenario), subject.factory);
      if (probe.engine_failed) failed_probe = probe;
      if (probe.refused) return check_before_refusal(std::move(probe));
      if (!probe.engine_failed) known_run = std::move(probe);
    } catch (const std::exception&) {
      // The property's own run reports it.
    }
  }
  Verdict verdict;
  try {
    verdict = run_property(property, scenario, subject, std::move(known_run), first_run_probes);
  } catch (PoolRanDry& dry) {
    return check_before_refusal(std::move(dry.run));
  }
  // A failure of the probe is the engine's: reported unless the property's
  // own run failed too or does not apply (a child that dies once, a race).
  if (failed_probe && verdict.applicable && verdict.passed) {
    return engine_refused(property, *failed_probe, "the scenario");
  }
  return verdict;
}

}  // namespace

std::string never_applicable(Property property, const EngineUnderTest& subject,
                             const Checkpoint* model) {
  if (const char* why = operation_needed(subject.traits, property)) {
    return std::string("the engine lacks ") + why;
  }
  const std::string arithmetic = underivable_arithmetic(subject.traits.arithmetic);
  const bool bounded = needs_bound(property) ||
                       (property != Property::kOracle && property != Property::kCapacity &&
                        invariance_for_traits(subject.traits, property) == Invariance::kBounded);
  if (!arithmetic.empty() && bounded) return "no bound is derived yet for " + arithmetic;
  if (property == Property::kCrossEngine && !subject.reference) {
    return "no reference engine given (--reference)";
  }
  if (property == Property::kGqa && model != nullptr &&
      model->config.n_kv_heads == model->config.n_heads) {
    return "the checkpoint is MHA (n_kv_heads == n_heads)";
  }
  return "";
}

Verdict check_property(Property property, const Scenario& scenario,
                       const EngineUnderTest& subject) {
  return check_probed(property, scenario, subject, std::nullopt);
}

std::span<const Property> check_all_order() {
  // P6 first: it compares the cache itself after every call, so it sees a
  // fault before any logit does and names the layer and slots.
  static constexpr Property kOrder[] = {
      Property::kCacheState,  Property::kPool,     Property::kPoison,     Property::kOracle,
      Property::kChunking,    Property::kBatch,    Property::kReset,      Property::kCompaction,
      Property::kSharing,     Property::kRollback, Property::kPrefix,     Property::kGqa,
      Property::kDeterminism, Property::kCapacity, Property::kCrossEngine};
  static_assert(std::size(kOrder) == size_t(kPropertyCount));
  return kOrder;
}

Verdict check_all(const Scenario& scenario, const EngineUnderTest& subject) {
  Verdict last;
  for (Property p : check_all_order()) {
    Verdict v = check_property(p, scenario, subject);
    if (!v.passed) return v;
    last = std::move(v);
  }
  last.summary = "every property passed";
  return last;
}

}  // namespace kvcheck
