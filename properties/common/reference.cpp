// The reference cache and the two ways to get a reference (reference.h
// says why they live apart).
#include "properties/common/reference.h"

#include <algorithm>
#include <utility>

namespace kvcheck::checks {

namespace {

// The references of the most recent model (config, weight seed, KV dtype),
// keyed by the tokens: at most kMaxEntries sequences and kMaxBytes in all,
// least recently used dropped first. A new model empties it.
class ReferenceCache {
 public:
  static constexpr size_t kMaxEntries = 16;
  static constexpr size_t kMaxBytes = size_t(32) << 20;

  std::shared_ptr<const SequenceReference> get(const Config& config, uint64_t seed,
                                               const Checkpoint* model, KvDtype kv_dtype,
                                               const ArithmeticTraits& arithmetic,
                                               const Weights& weights,
                                               std::span<const int32_t> tokens) {
    if (!valid_ || seed_ != seed || model_ != model || kv_dtype_ != kv_dtype ||
        !(arithmetic_ == arithmetic) || !(config_ == config)) {
      entries_.clear();
      bytes_ = 0;
      config_ = config;
      seed_ = seed;
      model_ = model;
      kv_dtype_ = kv_dtype;
      arithmetic_ = arithmetic;
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
      reference->bounds = derive_error_bounds(config, weights, tokens, kv_dtype, arithmetic);
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
  ArithmeticTraits arithmetic_;
  std::vector<Entry> entries_;  // least recently used first
  size_t bytes_ = 0;
};

}  // namespace

std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       std::span<const int32_t> tokens) {
  return reference_for(context, tokens, context.subject.traits.arithmetic);
}

std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       std::span<const int32_t> tokens,
                                                       const ArithmeticTraits& arithmetic) {
  thread_local ReferenceCache subject_cache, other_cache;
  ReferenceCache& cache =
      arithmetic == context.subject.traits.arithmetic ? subject_cache : other_cache;
  return cache.get(context.scenario.config, context.scenario.weight_seed,
                   context.scenario.model.get(), context.scenario.kv_dtype, arithmetic,
                   context.weights, tokens);
}

std::shared_ptr<const SequenceReference> reference_for(const Context& context,
                                                       const Segment& segment) {
  if (segment.history.empty()) return reference_for(context, segment.tokens);
  const Config& config = context.scenario.config;
  oracle::CellOutput replay = oracle::replay(config, context.weights, segment.history);
  HistoryBounds bounds =
      derive_history_bounds(config, context.weights, segment.history, context.scenario.kv_dtype,
                            context.subject.traits.arithmetic);
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
  reference->bounds.quantizer = bounds.quantizer;
  return reference;
}

}  // namespace kvcheck::checks
