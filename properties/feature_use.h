// Proof that a cache feature ran (vLLM's hybrid prefix-cache test fails when
// the cache or the drafter was never used): a check that never exercised a
// feature proves nothing about it. The coverage report says how often a case
// *could* exercise a feature (it was drawn); this records how often the
// engine said, through its own introspection (reused(), pool(), length()),
// that the feature *happened*. The campaign shows both side by side, and
// warns when a declared feature never happened (docs/REPORTS.md, "Proof of
// use").
//
// The runners of one check note what they observe into the FeatureUse scope
// open on their thread (check_property opens one per case), so no property
// has to carry the observations through its verdict by hand.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "engine/traits.h"

namespace kvcheck {

enum class Feature : uint8_t {
  kPrefixHit,     // a step took leading tokens from the prefix cache (reused() > 0)
  kKeyPartition,  // a prefix shared without keys was not shared across keys
  kCopyOnWrite,   // a block a fork shared was split when one side wrote to it
  kEviction,      // a cached block was taken for other data (pool: cached fell past the hits)
  kRollback,      // truncate or verify shortened a sequence (length() fell by n > 0)
  kCount
};

using FeatureMask = uint32_t;  // bit f: Feature f
constexpr FeatureMask feature_bit(Feature f) {
  return FeatureMask(1) << unsigned(f);
}

struct FeatureRow {
  Feature feature;
  std::string_view name;      // the reports' row
  std::string_view declared;  // the traits that offer it and let it be observed, in words
  std::string_view happened;  // what the engine said, in words
  // The engine offers the feature and the introspection that observes it.
  bool (*observable)(const OperationTraits& operations);
  // The one property whose check observes it ("P15"), or "" for any: the
  // drawn count counts only cases where it could have been seen.
  std::string_view observed_by = "";
};
// Every feature, in enum order.
std::span<const FeatureRow> feature_rows();
const FeatureRow& feature_row(Feature f);

// The features an engine with these operations offers and lets be observed.
FeatureMask observable_features(const OperationTraits& operations);

// Collects what the runners on this thread observe while it lives, of the
// `observable` features (others are not watched: their introspection may
// not exist). Scopes nest: an inner one watches what the outer one does and
// its observations reach the outer one too.
class FeatureUse {
 public:
  explicit FeatureUse(FeatureMask observable);
  ~FeatureUse();
  FeatureUse(const FeatureUse&) = delete;
  FeatureUse& operator=(const FeatureUse&) = delete;
  FeatureMask used() const { return used_; }
  FeatureMask observable() const { return observable_; }
  void add(FeatureMask used) { used_ |= used & observable_; }

 private:
  FeatureUse* outer_;
  FeatureMask observable_;
  FeatureMask used_ = 0;
};

// Notes that the engine said `f` happened (nothing when no scope is open).
void note_used(Feature f);
// Whether an observation of `f` would add anything: a scope is open, the
// engine offers `f`'s introspection and the scope has not seen it yet.
// Observers that cost an engine call ask first.
bool watching(Feature f);

}  // namespace kvcheck
