// P2 chunking: a prompt fed in other chunks (whole, token by token, a
// random split) gives the same logits as the scenario's own chunking:
// bitwise, or within 2B where the engine declares chunking bounded.
#include <string>
#include <utility>
#include <vector>

#include "model/rng.h"
#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// Keeps this property's random choices apart from the others'.
constexpr uint64_t kChunkingSalt = 0x6368756e6b696e67ull;  // "chunking"

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

}  // namespace

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

}  // namespace kvcheck::checks
