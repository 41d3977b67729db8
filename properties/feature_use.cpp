// The table of cache features whose use is proven, and the per-thread scope
// the runners note observations into (feature_use.h).
#include "properties/feature_use.h"

namespace kvcheck {

namespace {

constexpr FeatureRow kFeatures[] = {
    {Feature::kPrefixHit, "prefix hit", "prefix_cache",
     "a step's reused() > 0: tokens taken from the prefix cache",
     [](const OperationTraits& o) { return declares(o, "prefix_cache"); }},
    {Feature::kKeyPartition, "key partitioning", "cache_keys",
     "a prompt that hit with equal keys missed with different ones (P15's keyless twin)",
     [](const OperationTraits& o) { return declares(o, "cache_keys"); }, "P15"},
    {Feature::kCopyOnWrite, "copy-on-write", "fork, paged, pool_report",
     "a block a fork left in both tables (pool()) was in only one after a write",
     [](const OperationTraits& o) { return declares(o, "paged") && o.pool_report; }},
    {Feature::kEviction, "eviction", "prefix_cache, pool_report",
     "a step's pool() cached count fell by more than the blocks it hit",
     [](const OperationTraits& o) { return declares(o, "prefix_cache") && o.pool_report; }},
    {Feature::kRollback, "rollback", "truncate",
     "truncate or verify by n > 0 left length() n lower",
     [](const OperationTraits& o) { return declares(o, "truncate"); }},
};
static_assert(std::size(kFeatures) == size_t(Feature::kCount), "one row per feature");

thread_local FeatureUse* open_scope = nullptr;

}  // namespace

std::span<const FeatureRow> feature_rows() {
  return kFeatures;
}

const FeatureRow& feature_row(Feature f) {
  return kFeatures[size_t(f)];
}

FeatureMask observable_features(const OperationTraits& operations) {
  FeatureMask mask = 0;
  for (const FeatureRow& row : kFeatures) {
    if (row.observable(operations)) mask |= feature_bit(row.feature);
  }
  return mask;
}

FeatureUse::FeatureUse(FeatureMask observable)
    : outer_(open_scope),
      observable_(outer_ != nullptr ? outer_->observable_ & observable : observable) {
  open_scope = this;
}

FeatureUse::~FeatureUse() {
  open_scope = outer_;
  if (outer_ != nullptr) outer_->add(used_);
}

void note_used(Feature f) {
  if (open_scope != nullptr) open_scope->add(feature_bit(f));
}

bool watching(Feature f) {
  return open_scope != nullptr &&
         (open_scope->observable() & ~open_scope->used() & feature_bit(f)) != 0;
}

}  // namespace kvcheck
