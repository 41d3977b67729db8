#include "tests/properties/test_scenarios.h"

#include <sstream>

#include "model/rng.h"

namespace kvcheck::test {

Config small_config(Family family, int n_layers, int n_heads, int n_kv_heads) {
  Config c = family == Family::kGpt2 ? gpt2_tiny() : llama_tiny();
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.n_kv_heads = n_kv_heads;
  c.max_pos = 64;
  return c;
}

std::vector<std::vector<int32_t>> token_table(uint64_t seed, const std::vector<int>& lengths,
                                              int vocab) {
  SplitMix64 rng(seed);
  std::vector<std::vector<int32_t>> table;
  for (int n : lengths) {
    std::vector<int32_t>& tokens = table.emplace_back();
    for (int i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(rng.below(uint64_t(vocab))));
  }
  return table;
}

Scenario rich_scenario(Family family, int n_heads, int n_kv_heads, KvDtype dtype) {
  Scenario s;
  s.config = small_config(family, 2, n_heads, n_kv_heads);
  s.weight_seed = 11;
  s.capacity = 12;
  s.max_rows = 3;
  s.kv_dtype = dtype;
  s.sequences = token_table(5, {7, 12, 5, 6, 4}, s.config.vocab);
  s.calls = {S(0),
             S(1),
             P({{0, 3}, {1, 5}}),
             P({{1, 1}, {0, 1}}),
             S(2),
             P({{2, 2}, {0, 2}, {1, 1}}),
             F(0),  // s1, s2 move down a row
             P({{1, 2}, {2, 1}}),
             S(3),                         // reuses the freed row
             P({{3, 4}, {2, 2}, {1, 3}}),  // s1 reaches capacity exactly
             R(),
             S(4),
             P({{4, 3}}),
             P({{4, 1}})};
  return s;
}

Scenario window_scenario(Family family, int window, int pattern, KvDtype dtype) {
  Scenario s = rich_scenario(family, 2, family == Family::kLlama ? 1 : 2, dtype);
  s.config.sliding_window = window;
  s.config.sliding_window_pattern = pattern;
  return s;
}

Scenario context_shift_scenario() {
  Scenario s;
  s.config = small_config(Family::kLlama, 2, 4, 2);
  s.weight_seed = 17;
  s.capacity = 12;
  s.max_rows = 2;
  s.sequences = token_table(23, {7, 6}, s.config.vocab);
  const int max_pos = s.config.max_pos;
  s.calls = {S(0),
             P({{0, 5}}),
             Call::erase(0, 1, 3),
             Call::shift(0, 3, max_pos, -2),
             P({{0, 2}}),
             S(1),
             P({{1, 3}}),
             Call::erase(1, 2, 3),
             P({{1, 2}}),
             Call::shift(1, 0, max_pos - 4, 4),
             P({{1, 1}})};
  return s;
}

Scenario div_scenario() {
  Scenario s;
  s.config = small_config(Family::kLlama, 2, 4, 2);
  s.weight_seed = 19;
  s.capacity = 12;
  s.max_rows = 2;
  s.sequences = token_table(29, {8, 6}, s.config.vocab);
  const int max_pos = s.config.max_pos;
  s.calls = {S(0),
             P({{0, 6}}),
             Call::div(0, 0, max_pos, 2),
             P({{0, 2}}),
             S(1),
             P({{1, 4}}),
             Call::erase(1, 1, 2),
             P({{1, 1}}),
             Call::div(1, 0, max_pos, 3),
             Call::shift(1, 0, max_pos, 2),
             P({{1, 1}})};
  return s;
}

Scenario save_restore_scenario() {
  Scenario s;
  s.config = small_config(Family::kLlama, 2, 4, 2);
  s.weight_seed = 19;
  s.capacity = 12;
  s.max_rows = 3;
  s.sequences = token_table(29, {9, 6, 3}, s.config.vocab);
  const int max_pos = s.config.max_pos;
  s.calls = {S(0),
             P({{0, 4}}),
             Call::save(0),
             P({{0, 2}}),
             Call::truncate(0, 3),
             P({{0, 1}}),
             Call::restore(0),
             P({{0, 1}}),
             S(1),
             Call::save(1),
             P({{1, 3}}),
             Call::erase(1, 0, 1),
             Call::shift(1, 1, max_pos, -1),
             Call::save(1),
             P({{1, 2}}),
             Call::restore(1),
             P({{1, 1}}),
             Call::fork(2, 0, 5),
             P({{2, 2}, {0, 1}}),
             Call::restore(0),
             P({{2, 1}})};
  return s;
}

Scenario operations_scenario(Family family, int block_size, KvDtype dtype) {
  Scenario s;
  s.config = small_config(family, 2, 2, 2);
  s.weight_seed = 13;
  s.capacity = 12;
  s.max_rows = 3;
  s.kv_dtype = dtype;
  s.block_size = block_size;
  // s0 is fed 5, 2, 1, 1; s1 is forked from s0 at 5 (mid-block for most
  // B), fed 2 and 1, truncated to 0 and fed 2; s2 is forked from s0 at its
  // whole length after s0 lost 6 tokens across blocks, and fed 2; s0
  // finishes under s2; s3 starts after the reset.
  s.sequences = token_table(21, {9, 5, 2, 4}, s.config.vocab);
  s.calls = {S(0),
             P({{0, 5}}),
             P({{0, 2}}),
             Fk(1, 0, 5),
             P({{1, 2}, {0, 1}}),
             T(0, 6),
             Fk(2, 0, 2),
             P({{0, 1}, {2, 2}, {1, 1}}),
             F(0),
             T(1, 8),
             P({{1, 2}}),
             R(),
             S(3),
             P({{3, 4}})};
  return s;
}

Scenario prefix_scenario(Family family, int block_size, int pool_blocks) {
  Scenario s;
  s.config = small_config(family, 2, 2, 1);
  s.weight_seed = 17;
  s.capacity = 10;
  s.max_rows = 3;
  s.block_size = block_size;
  s.pool_blocks = pool_blocks;
  s.prefix_cache = true;
  s.sequences = token_table(5, {7, 8, 6, 6}, s.config.vocab);
  std::copy_n(s.sequences[0].begin(), 5, s.sequences[1].begin());
  std::copy_n(s.sequences[1].begin(), 4, s.sequences[2].begin());
  s.sequences[3] = s.sequences[0];
  s.sequences[3].resize(6);
  s.calls = {S(0),        P({{0, 6}}), P({{0, 1}}), F(0),
             S(1),        P({{1, 7}}), S(2),        P({{2, 5}, {1, 1}}),
             P({{2, 1}}), F(2),        Fl(),        S(3),
             P({{3, 6}}), F(1),        F(3),        Fl()};
  return s;
}

Scenario minimal_fault_scenario(Fault fault) {
  Scenario s;
  const auto model = [&](Family family, int layers, int heads, int kv_heads) {
    s.config = small_config(family, layers, heads, kv_heads);
  };
  s.weight_seed = 77;
  s.capacity = 4;
  s.max_rows = 4;
  model(Family::kGpt2, 1, 1, 1);
  switch (fault) {
    case Fault::kSharedLayerCache:
      model(Family::kGpt2, 2, 1, 1);
      s.calls = {S(0), P({{0, 1}}), P({{0, 1}})};
      break;
    case Fault::kSharedRows:
      s.calls = {S(0), S(1), P({{0, 1}, {1, 1}}), P({{0, 1}})};
      break;
    case Fault::kDecodePositionZero:
    case Fault::kPositionLagAfterFirst:
    case Fault::kMaskTopLeft:
    case Fault::kAppendOverwrites:
      s.calls = {S(0), P({{0, 1}}), P({{0, 1}})};
      break;
    case Fault::kChunkPositionRestart:
      s.calls = {S(0), P({{0, 1}}), P({{0, 2}})};
      break;
    case Fault::kPositionBumpPerLayer:
      model(Family::kGpt2, 2, 1, 1);
      s.calls = {S(0), P({{0, 1}})};
      break;
    case Fault::kTiledKvHeads:
      model(Family::kGpt2, 1, 4, 2);
      s.calls = {S(0), P({{0, 1}})};
      break;
    case Fault::kResetKeepsKv:
    case Fault::kResetKeepsPosition:
      s.calls = {S(0), P({{0, 1}}), R(), S(1), P({{1, 1}})};
      break;
    case Fault::kCompactionTableOnly:
      s.calls = {S(0), S(1), P({{0, 1}, {1, 1}}), F(0), P({{1, 1}})};
      break;
    case Fault::kRopeReapplied:
      model(Family::kLlama, 1, 1, 1);
      s.calls = {S(0), P({{0, 2}}), P({{0, 1}})};
      break;
    case Fault::kKvSwapped:
      s.calls = {S(0), P({{0, 1}})};
      break;
    case Fault::kCapacityWraps:
      s.capacity = 1;
      s.calls = {S(0), P({{0, 1}})};
      break;
    case Fault::kTruncateNoop:
    case Fault::kTruncateKeepsPosition:
      s.calls = {S(0), P({{0, 1}}), T(0, 1), P({{0, 1}})};
      break;
    case Fault::kResetClearsLayer0Only:
      model(Family::kGpt2, 2, 1, 1);
      s.calls = {S(0), P({{0, 1}}), R()};
      break;
    case Fault::kCowSkipped:
      s.block_size = 2;
      s.calls = {S(0), P({{0, 2}}), Fk(1, 0, 1), P({{1, 1}}), P({{0, 1}})};
      break;
    case Fault::kForkSharesPartialBlock:
      s.block_size = 2;
      s.calls = {S(0), P({{0, 1}}), Fk(1, 0, 1)};
      break;
    case Fault::kFreedBlockStillReferenced:
    case Fault::kRefcountLeak:
      s.block_size = 2;
      s.calls = {S(0), P({{0, 1}}), Fk(1, 0, 1), F(0)};
      break;
    case Fault::kBlockAliasing:
      s.block_size = 1;
      s.calls = {S(0), P({{0, 2}})};
      break;
    case Fault::kKvScalePerTensor:
      s.config.head_dim = 40;  // two scale blocks in the head: 32 and 8
      [[fallthrough]];
    case Fault::kKvScaleDropped:
    case Fault::kKvScaleSharedKv:
      s.kv_dtype = KvDtype::kQ8_0;
      s.calls = {S(0), P({{0, 1}})};
      break;
    case Fault::kPrefixHashOnly:
    case Fault::kPrefixHitExtraBlock:
      // s1's first chunk looks up s0's registered blocks (B = 1).
      s.block_size = 1;
      s.prefix_cache = true;
      s.calls = {S(0), P({{0, fault == Fault::kPrefixHashOnly ? 1 : 2}}), S(1), P({{1, 2}})};
      break;
    case Fault::kRefusalLeavesHalfTable:
      s.block_size = 1;
      s.pool_blocks = 1;
      s.calls = {S(0), P({{0, 2}})};
      break;
    case Fault::kWindowOffByOne:
      s.config.sliding_window = 1;
      s.calls = {S(0), P({{0, 1}})};
      break;
    case Fault::kWindowPerChunk:
      s.config.sliding_window = 2;
      s.calls = {S(0), P({{0, 3}})};
      break;
    case Fault::kRingIndexUnwrapped:
      s.config.sliding_window = 1;
      s.calls = {S(0), P({{0, 2}})};
      break;
    case Fault::kShiftKeepsK:
    case Fault::kShiftRotatesV:
    case Fault::kShiftWrongSign:
      // One cached token moved from position 0 to 1: its key must be
      // rotated by +1, its value left alone (P6 after the shift).
      model(Family::kLlama, 1, 1, 1);
      s.calls = {S(0), P({{0, 1}}), Call::shift(0, 0, 1, 1)};
      break;
    case Fault::kTruncateLate:
      // Both drafts rejected: the next token overwrites slot 0, and a late
      // rollback still shows it slot 1.
      s.calls = {S(0), P({{0, 2}}), Call::verify(0, 2, 0), P({{0, 1}})};
      break;
    case Fault::kTruncateAllNoop:
    case Fault::kTruncateKeepsLast:
      s.calls = {S(0), P({{0, 1}}), Call::verify(0, 1, 0), P({{0, 1}})};
      break;
    case Fault::kAbortFreesCached:
      // s0 is aborted after its first token (a whole block); the faulty
      // abort frees that block but leaves it indexed, and s1 = [1 5] hits it.
      s.block_size = 1;
      s.prefix_cache = true;
      s.calls = {S(0), P({{0, 1}}), Call::abort(0), S(1), P({{1, 2}})};
      break;
    case Fault::kPrefixIgnoresKey:
      // s0 (key 1) writes block [1]; s1 (key 2) = [1 5] must miss it.
      s.block_size = 1;
      s.prefix_cache = true;
      s.cache_keys = {1, 2};
      s.calls = {S(0), P({{0, 1}}), S(1), P({{1, 2}})};
      break;
    case Fault::kHitPromptLogitsStale:
      // s1 = [1 5] hits s0's block [1] after s0's second step.
      s.block_size = 1;
      s.prefix_cache = s.prompt_logits = true;
      s.calls = {S(0), P({{0, 1}}), P({{0, 1}}), S(1), P({{1, 2}})};
      break;
    case Fault::kOffloadBeforeWrite:
    case Fault::kOffloadCountsDrift:
      // s0's one block goes to the host tier and the next step brings it
      // back: before_write copied it without the token written into it;
      // counts_drift leaves the host block off the host free list.
      s.block_size = 1;
      s.calls = {S(0), P({{0, 1}}), Call::offload(0), P({{0, 1}})};
      break;
    case Fault::kRestoreKeepsTail:
      // llama.cpp #4005: a state saved before anything was fed, restored
      // after one token; the restore must leave the sequence empty.
      s.calls = {S(0), Call::save(0), P({{0, 1}}), Call::restore(0), P({{0, 1}})};
      break;
    case Fault::kCount:
      break;
  }
  int n_sequences = 0;
  for (const Call& c : s.calls) {
    n_sequences += c.kind == Call::Kind::kStart || c.kind == Call::Kind::kFork;
  }
  std::vector<int> lengths(size_t(n_sequences), 0);
  for (const Call& c : s.calls) {
    for (const ChunkSpec& chunk : c.chunks) lengths[size_t(chunk.sequence)] += chunk.length;
  }
  s.sequences = token_table(3, lengths, s.config.vocab);
  // Tokens 0 and 32 agree in the top bits of their one-block keys, so the
  // faulty index takes s0's block for s1's; s1 = [1 5] shares exactly one
  // block of s0 = [1 2].
  if (fault == Fault::kPrefixHashOnly) s.sequences = {{0}, {32, 7}};
  if (fault == Fault::kPrefixHitExtraBlock) s.sequences = {{1, 2}, {1, 5}};
  if (fault == Fault::kAbortFreesCached) s.sequences = {{1, 2}, {1, 5}};
  if (fault == Fault::kPrefixIgnoresKey) s.sequences = {{1}, {1, 5}};
  if (fault == Fault::kHitPromptLogitsStale) s.sequences = {{1, 2}, {1, 5}};
  return s;
}

std::string describe(const Verdict& verdict) {
  std::ostringstream out;
  out << verdict.summary << "\n" << verdict.detail;
  return out.str();
}

}  // namespace kvcheck::test
