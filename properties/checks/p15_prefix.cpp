// P15 prefix: a sequence whose first chunk hit the prefix cache took its
// blocks from a request with the same cache key (vLLM RFC #53194: "a cache
// hit that should have been a miss"), and gives the logits of a cold replay
// of the same content on a fresh engine, nothing cached (a warm hit against
// a cold run, SGLang #34683; common/replay.h).
#include <algorithm>
#include <span>

#include "properties/common/replay.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// The key a sequence's blocks carry: its own, or its fork root's.
uint32_t key_of(const Context& context, int s) {
  while (context.plan.forked_from[size_t(s)] >= 0) s = context.plan.forked_from[size_t(s)];
  return context.scenario.cache_key(s);
}

// Leading tokens of `s`'s stream its first chunk took from the cache.
int hit_tokens(const RunResult& run, size_t s) {
  if (s >= run.hit.size()) return 0;
  const std::vector<bool>& reused = run.hit[s];
  return int(std::find(reused.begin(), reused.end(), false) - reused.begin());
}

// Whether `t` held content beginning with `prefix` in a segment opened
// before call `before`. Within a segment content only grows, so its final
// content holds every content it had; a later growth can only make a source
// look possible, never fail a correct engine.
bool held_prefix(const Context& context, int t, std::span<const int32_t> prefix, int before) {
  for (const Segment& segment : context.plan.segments[size_t(t)]) {
    if (segment.begin_call >= before || segment.tokens.size() < prefix.size()) continue;
    if (std::equal(prefix.begin(), prefix.end(), segment.tokens.begin())) return true;
  }
  return false;
}

// The other sequences that held `s`'s first n tokens before its hit: with
// `s`'s key (a legitimate source) or with another.
struct Sources {
  std::vector<int> same_key, other_key;
};
Sources sources_of(const Context& context, int s, int n) {
  const std::vector<int32_t>& stream = context.scenario.sequences[size_t(s)];
  const std::span<const int32_t> prefix(stream.data(), size_t(n));
  const int hit_call = context.plan.call_of_position[size_t(s)][0];
  Sources out;
  for (int t = 0; t < int(context.scenario.sequences.size()); ++t) {
    if (t == s || !held_prefix(context, t, prefix, hit_call)) continue;
    (key_of(context, t) == key_of(context, s) ? out.same_key : out.other_key).push_back(t);
  }
  return out;
}

// A hit whose tokens only requests of other cache keys fed: shared blocks
// across keys (vLLM #30931, #53495, #44250). The oracle cannot see it (the
// logits are the same); the hit itself is the failure.
bool keys_hold(Verdict& verdict, const Context& context, const RunResult& run) {
  for (int s = 0; s < int(context.scenario.sequences.size()); ++s) {
    const int n = hit_tokens(run, size_t(s));
    if (n == 0) continue;
    const Sources from = sources_of(context, s, n);
    if (!from.same_key.empty() || from.other_key.empty()) continue;
    const int t = from.other_key.front();
    const int B = context.scenario.block_size;
    fail(verdict, {context.plan.call_of_position[size_t(s)][0], s, 0},
         "s" + std::to_string(s) + " (cache key " + std::to_string(key_of(context, s)) + ") hit " +
             std::to_string(n) + " cached tokens that only s" + std::to_string(t) + " (cache key " +
             std::to_string(key_of(context, t)) + ") wrote",
         "a prefix-cache hit across cache keys: blocks 0.." + std::to_string((n - 1) / B) +
             " of s" + std::to_string(s) + "'s table (tokens 0.." + std::to_string(n - 1) +
             ") came from s" + std::to_string(t) +
             "'s prompt, a request with another cache salt or adapter; blocks are shared "
             "only between equal keys (docs/OPERATIONS.md, \"Cache keys\")\n");
    return false;
  }
  return true;
}

// Proof of use (feature_use.h): the same scenario without keys, where a
// sequence that now hits more than with its key took the extra blocks from
// another key's request. The engine kept the keys apart where it would
// otherwise share.
void observe_partition(const Context& context, const RunResult& keyed) {
  Scenario keyless = context.scenario;
  keyless.cache_keys.clear();
  const RunResult twin = run_scenario(keyless, context.weights, context.factory);
  for (int s = 0; s < int(context.scenario.sequences.size()); ++s) {
    const int n = hit_tokens(twin, size_t(s));
    if (n <= hit_tokens(keyed, size_t(s))) continue;
    const Sources from = sources_of(context, s, n);
    if (from.same_key.empty() && !from.other_key.empty()) {
      note_used(Feature::kKeyPartition);
      return;
    }
  }
}

}  // namespace

Verdict check_prefix(const Context& context) {
  static constexpr ReplayKind kPrefix{
      .property = Property::kPrefix,
      // Which sequences hit is what the engine did: it says so in its run.
      .selects_by_run = true,
      .involved = [](const SchedulePlan&, const RunResult& run, size_t s) -> bool {
        return s < run.hit.size() &&
               std::find(run.hit[s].begin(), run.hit[s].end(), true) != run.hit[s].end();
      },
      .none_selected = "no sequence's first chunk hit the prefix cache",
      .replay = "a cold replay (fresh engine, nothing cached)",
      .passed = " prefix-cache hits equal their cold replays"};
  if (!context.scenario.prefix_cache) {
    return not_applicable(Property::kPrefix, "the scenario has no prefix cache (prefix_cache 0)");
  }
  const std::vector<uint32_t>& keys = context.scenario.cache_keys;
  if (std::any_of(keys.begin(), keys.end(), [](uint32_t k) { return k != 0; })) {
    const RunResult run = scenario_run(context);
    if (run.engine_failed) return engine_refused(Property::kPrefix, run, "the scenario");
    Verdict verdict = start_verdict(Property::kPrefix);
    if (!keys_hold(verdict, context, run)) return verdict;
    if (watching(Feature::kKeyPartition)) observe_partition(context, run);
  }
  return check_replay(context, kPrefix);
}

}  // namespace kvcheck::checks
