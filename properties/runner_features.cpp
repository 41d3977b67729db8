// What the runner observes of the cache features it drives (feature_use.h):
// after a call, the engine's own introspection says whether a prefix hit,
// a copy-on-write split, an eviction or a rollback happened. Each read is
// made only while the open FeatureUse scope still watches its feature and
// nothing sent ahead through a pipeline is in flight, so a case pays for a
// feature's pool() reads until it has been seen once.
#include <algorithm>

#include "properties/feature_use.h"
#include "properties/runner.h"

namespace kvcheck {

namespace {

// The block at `index` of the table of `id`, or -1.
int block_of(const PoolReport& pool, SequenceId id, int index) {
  for (const auto& [holder, table] : pool.tables) {
    if (holder == id) return size_t(index) < table.size() ? table[size_t(index)] : -1;
  }
  return -1;
}

}  // namespace

bool ScenarioRunner::observes(const Call& call) const {
  return posted_.empty() && !posts(call);
}

ScenarioRunner::Observed ScenarioRunner::observe_before(const Call& call) {
  Observed before;
  if (call.kind == Call::Kind::kStep && scenario_.prefix_cache && watching(Feature::kEviction) &&
      observes(call)) {
    before.cached = engine_->pool().cached;
  }
  return before;
}

void ScenarioRunner::observe_after(const Call& call, const Observed& before) {
  const int B = scenario_.block_size;
  switch (call.kind) {
    case Call::Kind::kStep:
      if (before.cached >= 0) observe_eviction(call, before.cached);
      if (cow_.index >= 0) observe_split(call);
      break;
    case Call::Kind::kFork:
      if (B > 0 && call.count % B != 0 && watching(Feature::kCopyOnWrite)) observe_fork(call);
      break;
    case Call::Kind::kTruncate:
    case Call::Kind::kVerify: {
      const int n = call.kind == Call::Kind::kTruncate ? call.count : call.count - call.accepted;
      const RunnerSequence& seq = sequences_[size_t(call.sequence)];
      if (n > 0 && watching(Feature::kRollback) && engine_->length(seq.id) == seq.held) {
        note_used(Feature::kRollback);
      }
      break;
    }
    default:
      break;
  }
}

void ScenarioRunner::observe_eviction(const Call& call, int cached_before) {
  const int B = scenario_.block_size;
  int hit_blocks = 0;
  for (const ChunkSpec& chunk : call.chunks) {
    hit_blocks += engine_->reused(sequences_[size_t(chunk.sequence)].id) / B;
  }
  if (cached_before - engine_->pool().cached > hit_blocks) note_used(Feature::kEviction);
}

void ScenarioRunner::observe_fork(const Call& call) {
  const int index = call.count / scenario_.block_size;
  const PoolReport pool = engine_->pool();
  const int parent = block_of(pool, sequences_[size_t(call.parent)].id, index);
  if (parent >= 0 && parent == block_of(pool, sequences_[size_t(call.sequence)].id, index)) {
    cow_ = {call.parent, call.sequence, index};
  }
}

void ScenarioRunner::observe_split(const Call& call) {
  const auto feeds = [&](int s) {
    return std::any_of(call.chunks.begin(), call.chunks.end(),
                       [s](const ChunkSpec& c) { return c.sequence == s; });
  };
  if (!feeds(cow_.parent) && !feeds(cow_.child)) return;
  const SharedBlock shared = std::exchange(cow_, SharedBlock{});
  const RunnerSequence& parent = sequences_[size_t(shared.parent)];
  const RunnerSequence& child = sequences_[size_t(shared.child)];
  if (!parent.running || !child.running || !watching(Feature::kCopyOnWrite)) return;
  const PoolReport pool = engine_->pool();
  const int a = block_of(pool, parent.id, shared.index);
  const int b = block_of(pool, child.id, shared.index);
  if (a >= 0 && b >= 0 && a != b) note_used(Feature::kCopyOnWrite);
}

}  // namespace kvcheck
