#include "tests/engine/fault_cases.h"

#include <algorithm>

#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {

Op start() {
  return {Op::kStart};
}
Op step(std::vector<std::pair<int, int>> e) {
  return {Op::kStep, std::move(e)};
}
Op finish(int s) {
  return {Op::kFinish, {}, s};
}
Op start_keyed(int key) {
  return {Op::kStart, {}, 0, key};
}
Op abort(int s) {
  return {Op::kAbort, {}, s};
}
Op offload(int s) {
  return {Op::kOffload, {}, s};
}
Op save(int s) {
  return {Op::kSave, {}, s};
}
Op restore(int s) {
  return {Op::kRestore, {}, s};
}
Op reset() {
  return {Op::kReset};
}
Op fork(int parent, int n) {
  return {Op::kFork, {}, parent, n};
}
Op truncate(int sequence, int n) {
  return {Op::kTruncate, {}, sequence, n};
}
Op observe() {
  return {Op::kObserve};
}
Op try_step(std::vector<std::pair<int, int>> e) {
  return {Op::kTryStep, std::move(e)};
}

Op shift(int sequence, int delta) {
  return {Op::kShift, {}, sequence, delta};
}

bool MinimalCase::cpu_only() const {
  return kv_dtype == KvDtype::kQ8_0 || sliding_window > 0 || prompt_logits ||
         std::any_of(ops.begin(), ops.end(), [](const Op& op) {
           return op.kind == Op::kShift || op.kind == Op::kOffload || op.kind == Op::kSave ||
                  op.kind == Op::kRestore;
         });
}

Outcome run_minimal_case(const MinimalCase& m, FaultSet faults, const MakeEngine& make_engine) {
  Config c = m.family == Family::kGpt2 ? gpt2_tiny() : llama_tiny();
  c.n_layers = m.n_layers, c.n_heads = m.n_heads, c.n_kv_heads = m.n_kv_heads;
  if (m.head_dim > 0) c.head_dim = m.head_dim;
  c.sliding_window = m.sliding_window;
  EngineOptions o;
  o.kv_dtype = m.kv_dtype;
  o.capacity = m.capacity;
  o.max_rows = 4;
  o.faults = faults;
  o.block_size = m.block_size;
  o.pool_blocks = m.pool_blocks;
  o.prefix_cache = m.prefix_cache;
  o.prompt_logits = m.prompt_logits;
  // A host tier as large as the default pool where the script offloads.
  if (std::any_of(m.ops.begin(), m.ops.end(), [](const Op& op) { return op.kind == Op::kOffload; }))
    o.host_blocks = o.max_rows * ((m.capacity + m.block_size - 1) / m.block_size);
  auto engine = make_engine(c, init_weights(c, 77), o);
  std::vector<SequenceId> ids;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<size_t> fed;
  std::vector<float> all, logits;
  try {
    for (const Op& op : m.ops) {
      switch (op.kind) {
        case Op::kStart:
          ids.push_back(op.count != 0 ? engine->start_keyed(uint64_t(op.count)) : engine->start());
          tokens.push_back(ids.size() <= m.prompts.size() ? m.prompts[ids.size() - 1]
                                                          : random_tokens(ids.size(), 16, c.vocab));
          fed.push_back(0);
          break;
        case Op::kStep:
        case Op::kTryStep: {
          std::vector<BatchEntry> batch;
          for (auto [s, n] : op.entries) {
            batch.push_back(
                {ids[size_t(s)],
                 std::span<const int32_t>(tokens[size_t(s)]).subspan(fed[size_t(s)], size_t(n))});
            fed[size_t(s)] += size_t(n);
          }
          if (op.kind == Op::kTryStep) {
            try {
              engine->step(batch, logits);
            } catch (const EngineError&) {
              all.push_back(-1.0f);
              for (auto [s, n] : op.entries) fed[size_t(s)] -= size_t(n);
              break;
            }
          } else {
            engine->step(batch, logits);
          }
          all.insert(all.end(), logits.begin(), logits.end());
          break;
        }
        case Op::kFinish:
          engine->finish(ids[size_t(op.sequence)]);
          break;
        case Op::kAbort:
          engine->abort(ids[size_t(op.sequence)]);
          break;
        case Op::kOffload:
          engine->offload(ids[size_t(op.sequence)]);
          break;
        case Op::kSave:
          engine->save_state(ids[size_t(op.sequence)]);
          break;
        case Op::kRestore:
          engine->restore_state(ids[size_t(op.sequence)]);
          break;
        case Op::kReset:
          engine->reset();
          break;
        case Op::kFork:
          ids.push_back(engine->fork(ids[size_t(op.sequence)], op.count));
          tokens.push_back(random_tokens(ids.size(), 16, c.vocab));
          fed.push_back(0);
          break;
        case Op::kTruncate:
          engine->truncate(ids[size_t(op.sequence)], op.count);
          break;
        case Op::kShift:
          engine->shift(ids[size_t(op.sequence)], 0, c.max_pos, op.count);
          break;
        case Op::kObserve: {
          const PoolReport pool = engine->pool();
          int references = 0;
          for (int r : pool.refcounts) references += r;
          all.push_back(float(pool.free));
          all.push_back(float(pool.used));
          all.push_back(float(references));
          all.push_back(float(pool.host_free));
          all.push_back(engine->unheld_storage_check().empty() ? 1.0f : 0.0f);
          break;
        }
      }
    }
  } catch (const EngineError& e) {
    return std::string(e.what());
  }
  return all;
}

bool same_outcome(const Outcome& a, const Outcome& b) {
  if (a.index() != b.index()) return false;
  if (a.index() == 1) return std::get<1>(a) == std::get<1>(b);
  return bitwise_equal(std::get<0>(a), std::get<0>(b));
}

const std::vector<MinimalCase>& minimal_cases() {
  using F = Family;
  static const std::vector<MinimalCase> cases = {
      {Fault::kSharedLayerCache, F::kGpt2, 2, 1, 1, 4, {start(), step({{0, 1}}), step({{0, 1}})}},
      {Fault::kSharedRows, F::kGpt2, 1, 1, 1, 4, {start(), start(), step({{0, 1}, {1, 1}})}},
      {Fault::kDecodePositionZero, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}}), step({{0, 1}})}},
      {Fault::kChunkPositionRestart,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), step({{0, 2}})}},
      {Fault::kPositionLagAfterFirst,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), step({{0, 1}})}},
      {Fault::kPositionBumpPerLayer, F::kGpt2, 2, 1, 1, 4, {start(), step({{0, 1}})}},
      {Fault::kTiledKvHeads, F::kGpt2, 1, 4, 2, 4, {start(), step({{0, 1}})}},
      {Fault::kResetKeepsKv,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), reset(), start(), step({{1, 1}})}},
      {Fault::kResetKeepsPosition,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), reset(), start(), step({{1, 1}})}},
      {Fault::kMaskTopLeft, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}}), step({{0, 1}})}},
      {Fault::kAppendOverwrites, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}}), step({{0, 1}})}},
      {Fault::kCompactionTableOnly,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), start(), step({{0, 1}, {1, 1}}), finish(0), step({{1, 1}})}},
      {Fault::kRopeReapplied, F::kLlama, 1, 1, 1, 4, {start(), step({{0, 2}}), step({{0, 1}})}},
      {Fault::kKvSwapped, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}})}},
      {Fault::kCapacityWraps, F::kGpt2, 1, 1, 1, 1, {start(), step({{0, 1}}), step({{0, 1}})}},
      // The operations (docs/FAULTS.md derives each).
      {Fault::kTruncateNoop,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), truncate(0, 1), step({{0, 1}})}},
      {Fault::kTruncateKeepsPosition,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), truncate(0, 1), step({{0, 1}})}},
      {Fault::kResetClearsLayer0Only,
       F::kGpt2,
       2,
       1,
       1,
       4,
       {start(), step({{0, 1}}), reset(), observe()}},
      {Fault::kCowSkipped,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 2}}), fork(0, 1), step({{1, 1}}), step({{0, 1}})},
       2},
      {Fault::kForkSharesPartialBlock,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), fork(0, 1), observe()},
       2},
      {Fault::kFreedBlockStillReferenced,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), fork(0, 1), finish(0), observe()},
       2},
      {Fault::kRefcountLeak,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), fork(0, 1), finish(0), observe()},
       2},
      {Fault::kBlockAliasing, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 2}})}, 1},
      // q8_0: one token's K/V; per tensor needs two scale blocks in a head.
      {Fault::kKvScaleDropped, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}})}, 0, KvDtype::kQ8_0},
      {Fault::kKvScalePerTensor,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}})},
       0,
       KvDtype::kQ8_0,
       40},
      {Fault::kKvScaleSharedKv, F::kGpt2, 1, 1, 1, 4, {start(), step({{0, 1}})}, 0, KvDtype::kQ8_0},
      // Tokens 0 and 32 agree in the top 8 (so 4) bits of their one-block keys.
      {Fault::kPrefixHashOnly,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 2}}), start(), step({{1, 2}})},
       1,
       KvDtype::kF32,
       0,
       0,
       true,
       {{0, 5}, {32, 7}}},
      {Fault::kPrefixHitExtraBlock,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 3}}), start(), step({{1, 2}}), step({{0, 1}})},
       1,
       KvDtype::kF32,
       0,
       0,
       true,
       {{1, 2, 3, 4}, {1, 5}}},
      {Fault::kRefusalLeavesHalfTable,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), start(), try_step({{0, 1}, {1, 2}}), observe()},
       1,
       KvDtype::kF32,
       0,
       2},
      // Sliding windows: W=1 sees one key, the fault none; W=2 over one
      // 3-token chunk: row 2 re-reads the ring from the chunk's first window
      // (3 keys, k2 twice); W=1, a 2-token chunk: token 1 is written past
      // the ring and reads token 0's K/V.
      {Fault::kWindowOffByOne,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}})},
       0,
       KvDtype::kF32,
       0,
       0,
       false,
       {},
       1},
      {Fault::kWindowPerChunk,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 3}})},
       0,
       KvDtype::kF32,
       0,
       0,
       false,
       {},
       2},
      {Fault::kRingIndexUnwrapped,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 2}})},
       0,
       KvDtype::kF32,
       0,
       0,
       false,
       {},
       1},
      // One cell moved from position 0 to 1, then a decode at 2 reads it.
      {Fault::kShiftKeepsK,
       F::kLlama,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), shift(0, 1), step({{0, 1}})}},
      {Fault::kShiftRotatesV,
       F::kLlama,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), shift(0, 1), step({{0, 1}})}},
      {Fault::kShiftWrongSign,
       F::kLlama,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), shift(0, 1), step({{0, 1}})}},
      // Speculative rollback (verify is truncate on the engine).
      {Fault::kTruncateLate,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 2}}), truncate(0, 2), step({{0, 1}})}},
      {Fault::kTruncateAllNoop,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), truncate(0, 1), step({{0, 1}})}},
      {Fault::kTruncateKeepsLast,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), truncate(0, 1), step({{0, 1}})}},
      // An aborted prefill's block, freed yet still indexed: s1 hits it.
      {Fault::kAbortFreesCached,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), abort(0), start(), step({{1, 2}})},
       1,
       KvDtype::kF32,
       0,
       0,
       true,
       {{1, 2}, {1, 5}}},
      // s1 (key 2) hits the block s0 (key 1) wrote: its first logit row is
      // the reused NaN row instead of a computed one.
      {Fault::kPrefixIgnoresKey,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start_keyed(1), step({{0, 1}}), start_keyed(2), step({{1, 2}})},
       1,
       KvDtype::kF32,
       0,
       0,
       true,
       {{1}, {1, 5}}},
      // s1 = [1 5] hits s0's block [1]; its reused row keeps the buffer's
      // last row, s0's logits of token 2 at position 1, not a cold run's.
      {Fault::kHitPromptLogitsStale,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), step({{0, 1}}), start(), step({{1, 2}})},
       1,
       KvDtype::kF32,
       0,
       0,
       true,
       {{1, 2}, {1, 5}},
       0,
       true},
      // s0's one block goes to the host tier and comes back for the next
      // token: the copy missed the token written into it (NaN logits).
      {Fault::kOffloadBeforeWrite,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), offload(0), step({{0, 1}})},
       1},
      // The same round trip: the host block is not handed back.
      {Fault::kOffloadCountsDrift,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), step({{0, 1}}), offload(0), step({{0, 1}}), observe()},
       1},
      // A state saved empty, restored after one token (llama.cpp #4005):
      // the faulty restore keeps that token, and the next one goes at
      // position 1 and attends to it.
      {Fault::kRestoreKeepsTail,
       F::kGpt2,
       1,
       1,
       1,
       4,
       {start(), save(0), step({{0, 1}}), restore(0), step({{0, 1}})}},
  };
  return cases;
}

}  // namespace kvcheck::test
