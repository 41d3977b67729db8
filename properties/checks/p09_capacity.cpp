// P9 capacity: a step past a sequence's capacity is refused with the
// documented error (EngineError kCapacity), changes no sequence's length,
// and every sequence goes on as if nothing had happened: its next logits
// equal its solo run's. Catches a cache that wraps or overwrites silently.
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "model/rng.h"
#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// Keeps this property's random choices apart from the others'.
constexpr uint64_t kCapacitySalt = 0x6361706163697479ull;  // "capacity"

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

// The engine after the scenario, and what the probes have done to it.
struct ProbeRun {
  const Context& context;
  Engine& engine;
  SplitMix64 rng;
  std::vector<Probe> probes;
  int call;                   // probes are numbered on from the scenario's calls
  std::vector<float> logits;  // the engine's output of the last probe call
};

std::string probe_name(const Probe& p) {
  return p.sequence >= 0 ? "s" + std::to_string(p.sequence) : std::string("the probe sequence");
}

// Why P9 does not apply to the scenario itself, or "".
std::string scenario_excludes(const Scenario& scenario) {
  if (scenario.prefix_cache) {
    // Its probes feed sequences directly and compare every logit; a prefix
    // hit leaves some uncomputed (P15 checks those sequences).
    return "the scenario has a prefix cache (its probes would take hits)";
  }
  if (scenario.pool_blocks > 0) {
    // Its probes would meet the pool's refusals before the capacity's.
    return "the scenario's pool (pool_blocks " + std::to_string(scenario.pool_blocks) +
           ") may run dry before the capacity is reached";
  }
  return "";
}

// The probes: the plain sequences still running after the scenario, else a
// fresh one. False (with the verdict filled) when P9 cannot go on.
bool start_probes(Verdict& verdict, const ScenarioRunner& runner, ProbeRun& r) {
  const Context& context = r.context;
  const size_t n = context.scenario.sequences.size();
  for (size_t s = 0; s < n; ++s) {
    const int sequence = static_cast<int>(s);
    if (!runner.running(sequence) || !context.plan.plain[s]) continue;
    const std::span<const int32_t> tokens = fed_tokens(context, sequence);
    r.probes.push_back({sequence, runner.id(sequence),
                        std::vector<int32_t>(tokens.begin(), tokens.end()), context.plan.chunks[s],
                        runner.logits(sequence),
                        static_cast<int32_t>(r.rng.below(uint64_t(context.vocab)))});
  }
  if (!r.probes.empty()) return true;
  for (size_t s = 0; s < n; ++s) {
    if (runner.running(static_cast<int>(s))) {
      verdict = not_applicable(Property::kCapacity,
                               "only forked or truncated sequences run after the scenario");
      return false;
    }
  }
  try {
    r.probes.push_back({-1,
                        r.engine.start(),
                        {},
                        {},
                        {},
                        static_cast<int32_t>(r.rng.below(uint64_t(context.vocab)))});
  } catch (const EngineError& e) {
    Location where;
    where.call = static_cast<int>(context.scenario.calls.size());
    fail(verdict, where, "starting a probe sequence after the scenario was refused",
         std::string("EngineError: ") + e.what() + "\n");
    return false;
  }
  return true;
}

// One step past the capacity of probe `i` (batched after a valid decode of
// another probe where one has room) must be refused as kCapacity, leaving
// every length as it was.
bool refuses_overflow(Verdict& verdict, ProbeRun& r, size_t i) {
  const int capacity = r.context.scenario.capacity;
  const Probe& target = r.probes[i];
  const int length = static_cast<int>(target.tokens.size());
  std::vector<int32_t> overflow;  // [capacity - length + 1]
  for (int j = 0; j < capacity - length + 1; ++j) {
    overflow.push_back(static_cast<int32_t>(r.rng.below(uint64_t(r.context.vocab))));
  }
  std::vector<BatchEntry> batch;
  std::string companion;
  for (const Probe& other : r.probes) {
    if (&other == &target || static_cast<int>(other.tokens.size()) >= capacity) continue;
    batch.push_back({other.id, std::span<const int32_t>(&other.next_token, 1)});
    companion = " batched after a valid decode of " + probe_name(other);
    break;
  }
  batch.push_back({target.id, overflow});
  Location where;
  where.call = r.call;
  where.sequence = target.sequence;
  where.position = capacity;
  const std::string what = "probe call " + std::to_string(r.call) + ": " +
                           std::to_string(overflow.size()) + " tokens for " + probe_name(target) +
                           " at position " + std::to_string(length) + " (capacity " +
                           std::to_string(capacity) + ")" + companion;
  try {
    r.engine.step(batch, r.logits);
    fail(verdict, where,
         probe_name(target) + ": a step past the capacity by 1 was accepted, not refused",
         what + "\nexpected EngineError kCapacity; the engine returned logits\n");
    return false;
  } catch (const EngineError& e) {
    if (e.kind() != EngineError::Kind::kCapacity) {
      fail(verdict, where,
           probe_name(target) + ": a step past the capacity was refused with the wrong kind",
           what + "\nEngineError kind " + std::to_string(static_cast<int>(e.kind())) + ": " +
               e.what() + "\n");
      return false;
    }
  }
  for (const Probe& p : r.probes) {
    const int now = r.engine.length(p.id);
    if (now != static_cast<int>(p.tokens.size())) {
      where.sequence = p.sequence;
      where.position = now;
      fail(verdict, where,
           probe_name(p) + ": the refused step changed its length from " +
               std::to_string(p.tokens.size()) + " to " + std::to_string(now),
           what + "\n");
      return false;
    }
  }
  return true;
}

// p's logits after the refusals and one more token differ from its solo
// run at `at`: fails the verdict there.
void fail_continued(Verdict& verdict, const ProbeRun& r, const Probe& p, const SoloRun& solo,
                    Location where, size_t at) {
  const size_t V = size_t(r.context.vocab);
  where.position = static_cast<int>(at / V);
  std::ostringstream detail;
  detail << probe_name(p) << " after the refused steps and one more token, vs its solo run ("
         << describe_chunks(p.chunks) << "): first difference at position " << where.position
         << " vocab " << at % V << "\n";
  if (at < solo.logits.size() && at < p.logits.size()) {
    detail << "  solo: " << float_with_bits(solo.logits[at])
           << "\n  after the refusal: " << float_with_bits(p.logits[at]) << "\n";
  }
  fail(verdict, where,
       probe_name(p) + " position " + std::to_string(where.position) + ": " +
           disagreement(solo.logits, "its solo run", p.logits, "the run after the refused steps",
                        at, where.call, "logits after the refused step differ from its solo run"),
       detail.str());
}

// Every probe with room decodes one more token, which must be accepted and
// give its solo run's logits.
bool probes_continue(Verdict& verdict, ProbeRun& r, int& continued) {
  const Context& context = r.context;
  for (Probe& p : r.probes) {
    if (static_cast<int>(p.tokens.size()) >= context.scenario.capacity) continue;
    const BatchEntry entry{p.id, std::span<const int32_t>(&p.next_token, 1)};
    Location where;
    where.call = r.call;
    where.sequence = p.sequence;
    where.position = static_cast<int>(p.tokens.size());
    try {
      r.engine.step(std::span<const BatchEntry>(&entry, 1), r.logits);
    } catch (const EngineError& e) {
      fail(verdict, where, probe_name(p) + ": a valid decode after the refused steps was refused",
           std::string("EngineError: ") + e.what() + "\n");
      return false;
    }
    ++r.call;
    ++continued;
    p.tokens.push_back(p.next_token);
    p.chunks.push_back(1);
    p.logits.insert(p.logits.end(), r.logits.begin(), r.logits.end());
    const SoloRun solo = run_solo(context, p.tokens, p.chunks);
    if (solo.run.engine_failed) {
      verdict = engine_refused(Property::kCapacity, solo.run, "the solo run of " + probe_name(p));
      return false;
    }
    // Solo vs beside the refused sequences: a placement, so the batch promise.
    const std::optional<size_t> at =
        first_difference(context, context.subject.traits.invariance.batch, p.tokens, solo.logits,
                         p.logits, &verdict.worst_ratio);
    if (!at) continue;
    fail_continued(verdict, r, p, solo, where, *at);
    return false;
  }
  return true;
}

}  // namespace

Verdict check_capacity(const Context& context) {
  Verdict verdict = start_verdict(Property::kCapacity);
  if (std::string why = scenario_excludes(context.scenario); !why.empty()) {
    return not_applicable(Property::kCapacity, std::move(why));
  }
  // "Others intact" compares within 2B where the batch promise is bounded
  // (B of the engine's declared arithmetic, docs/TOLERANCE.md).
  const Scenario& scenario = context.scenario;
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
  ProbeRun r{context,
             engine,
             SplitMix64(context.digest ^ kCapacitySalt),
             {},
             static_cast<int>(scenario.calls.size()),
             {}};
  if (!start_probes(verdict, runner, r)) return verdict;
  for (size_t i = 0; i < r.probes.size(); ++i, ++r.call) {
    if (!refuses_overflow(verdict, r, i)) return verdict;
  }
  int continued = 0;  // Every sequence goes on as if nothing had happened.
  if (!probes_continue(verdict, r, continued)) return verdict;
  pass(verdict, std::to_string(r.probes.size()) + " refusals, " + std::to_string(continued) +
                    " sequences continued");
  return verdict;
}

}  // namespace kvcheck::checks
