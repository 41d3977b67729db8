// Coverage tags of a scenario (generators.h): which shapes it holds, read
// by walking its calls on the harness's model, for the generator tests and
// the campaign's coverage report.
#include <algorithm>

#include "properties/rc/generators.h"

namespace kvcheck::rcgen {

Coverage& Coverage::operator|=(const Coverage& o) {
  for (auto member : {&Coverage::gpt2,
                      &Coverage::mha,
                      &Coverage::gqa,
                      &Coverage::mqa,
                      &Coverage::batched_step,
                      &Coverage::mixed_step,
                      &Coverage::one_token_chunk,
                      &Coverage::reset,
                      &Coverage::finish,
                      &Coverage::reused_row,
                      &Coverage::at_capacity,
                      &Coverage::reduced_dtype,
                      &Coverage::paged,
                      &Coverage::fork,
                      &Coverage::fork_mid_block,
                      &Coverage::fork_at_boundary,
                      &Coverage::truncate,
                      &Coverage::truncate_to_zero,
                      &Coverage::truncate_across_blocks,
                      &Coverage::rollback,
                      &Coverage::cow_write,
                      &Coverage::q8_multi_block,
                      &Coverage::wide_head,
                      &Coverage::prefix_cache,
                      &Coverage::flush,
                      &Coverage::small_pool,
                      &Coverage::shared_prompt,
                      &Coverage::window,
                      &Coverage::window_wraps,
                      &Coverage::window_straddle,
                      &Coverage::erase,
                      &Coverage::shift,
                      &Coverage::shifts_in_a_row,
                      &Coverage::erase_middle_then_step,
                      &Coverage::shift_up,
                      &Coverage::shift_middle_then_step,
                      &Coverage::fed_with_gap,
                      &Coverage::div,
                      &Coverage::fed_with_shared_position,
                      &Coverage::verify,
                      &Coverage::verify_reject_all,
                      &Coverage::verify_accept_all,
                      &Coverage::verify_one_draft,
                      &Coverage::verify_across_blocks,
                      &Coverage::verify_forked,
                      &Coverage::abort,
                      &Coverage::hit_after_abort,
                      &Coverage::cache_keys,
                      &Coverage::shared_prompt_across_keys,
                      &Coverage::prompt_logits,
                      &Coverage::offload,
                      &Coverage::offload_then_step,
                      &Coverage::restore,
                      &Coverage::restore_then_step,
                      &Coverage::prefill,
                      &Coverage::decode,
                      &Coverage::start,
                      &Coverage::f32,
                      &Coverage::bf16,
                      &Coverage::f16,
                      &Coverage::q8_0}) {
    this->*member = this->*member || o.*member;
  }
  return *this;
}

namespace {

void model_tags(const Scenario& s, Coverage& cov) {
  const Config& c = s.config;
  cov.gpt2 = c.family == Family::kGpt2;
  cov.mha = c.n_kv_heads == c.n_heads;
  cov.mqa = c.n_kv_heads == 1 && c.n_heads > 1;
  cov.gqa = c.n_kv_heads > 1 && c.n_kv_heads < c.n_heads;
  cov.reduced_dtype = s.kv_dtype != KvDtype::kF32;
  cov.f32 = s.kv_dtype == KvDtype::kF32;
  cov.bf16 = s.kv_dtype == KvDtype::kBF16;
  cov.f16 = s.kv_dtype == KvDtype::kF16;
  cov.q8_0 = s.kv_dtype == KvDtype::kQ8_0;
  cov.q8_multi_block = s.kv_dtype == KvDtype::kQ8_0 && c.head_dim > int(kQ8Block);
  cov.wide_head = c.head_dim >= 64;
  cov.paged = s.block_size > 0;
  cov.window = c.sliding_window > 0;
  cov.prefix_cache = s.prefix_cache;
  cov.small_pool = s.pool_blocks > 0;
  cov.prompt_logits = s.prompt_logits;
}

// Walks the calls on the model, tagging each call's shape in the state
// before it runs.
class CoverageWalk {
 public:
  CoverageWalk(const Scenario& s, Coverage& cov)
      : s_(s),
        cov_(cov),
        model_(s),
        one_token_chunk_(s.sequences.size()),
        shifted_(s.sequences.size()),
        forked_(s.sequences.size()),
        shares_partial_block_(s.sequences.size()),
        pending_erase_(s.sequences.size()),
        pending_shift_(s.sequences.size()),
        on_host_(s.sequences.size()),
        restored_(s.sequences.size()),
        fed_at_save_(s.sequences.size()) {}

  void walk() {
    for (const Call& call : s_.calls) {
      if (call.kind == Call::Kind::kStart) start(call);
      if (call.kind == Call::Kind::kStep) step(call);
      if (call.kind == Call::Kind::kFork) fork(call);
      if (call.kind == Call::Kind::kTruncate) truncate(call);
      if (call.kind == Call::Kind::kVerify) verify(call);
      if (call.kind == Call::Kind::kAbort) abort(call);
      if (call.kind == Call::Kind::kErase) erase(call);
      if (call.kind == Call::Kind::kShift) shift(call);
      cov_.div |= call.kind == Call::Kind::kDiv;
      if (call.kind == Call::Kind::kOffload) offload(call);
      if (call.kind == Call::Kind::kSave)
        fed_at_save_[size_t(call.sequence)] = model_.at(call.sequence).fed;
      if (call.kind == Call::Kind::kRestore) restore(call);
      cov_.flush |= call.kind == Call::Kind::kFlush;
      cov_.finish |= call.kind == Call::Kind::kFinish;
      cov_.reset |= call.kind == Call::Kind::kReset;
      finished_since_reset_ = (finished_since_reset_ || call.kind == Call::Kind::kFinish) &&
                              call.kind != Call::Kind::kReset;
      operation(call.kind).apply(model_, call);
    }
  }

 private:
  void start(const Call& call) {
    cov_.start = true;
    cov_.reused_row |= finished_since_reset_;
    const std::vector<int32_t>& mine = s_.sequences[size_t(call.sequence)];
    const size_t B = size_t(s_.block_size);
    cov_.cache_keys |= s_.cache_key(call.sequence) != 0;
    for (const int e : started_) {
      if (B == 0) break;
      const std::vector<int32_t>& earlier = s_.sequences[size_t(e)];
      const bool shared =
          mine.size() > B && earlier.size() >= B &&
          std::equal(mine.begin(), mine.begin() + std::ptrdiff_t(B), earlier.begin());
      cov_.shared_prompt |= shared;
      cov_.shared_prompt_across_keys |=
          shared && s_.prefix_cache && s_.cache_key(e) != s_.cache_key(call.sequence);
    }
    started_.push_back(call.sequence);
    for (const std::vector<int32_t>& fed : aborted_) {
      cov_.hit_after_abort |=
          s_.prefix_cache && B > 0 && mine.size() > B && fed.size() >= B &&
          std::equal(mine.begin(), mine.begin() + std::ptrdiff_t(B), fed.begin());
    }
  }

  void step(const Call& call) {
    bool prefill = false, decode_token = false;
    cov_.batched_step |= call.chunks.size() >= 2;
    for (const ChunkSpec& chunk : call.chunks) {
      const size_t i = size_t(chunk.sequence);
      const SequenceModel& seq = model_.at(chunk.sequence);
      cov_.cow_write |= bool(shares_partial_block_[i]);
      cov_.fed_with_gap |= seq.gapped();
      cov_.fed_with_shared_position |= shares_a_position(seq);
      cov_.erase_middle_then_step |= pending_erase_[i];
      cov_.shift_middle_then_step |= pending_shift_[i];
      pending_erase_[i] = pending_shift_[i] = false;
      cov_.offload_then_step |= bool(on_host_[i]);
      on_host_[i] = false;  // the step brings its blocks back
      cov_.restore_then_step |= bool(restored_[i]);
      restored_[i] = false;
      if (chunk.length == 1) {
        one_token_chunk_[i] = true;
        decode_token |= seq.held() > 0;
      } else {
        prefill = true;
        cov_.one_token_chunk |= bool(one_token_chunk_[i]);
      }
      const int W = s_.config.sliding_window, fed = seq.fed;
      cov_.window_straddle |= W > 0 && chunk.length > 1 && fed / W != (fed + chunk.length - 1) / W;
      cov_.at_capacity |= seq.held() + chunk.length == s_.capacity;
      cov_.window_wraps |= W > 0 && fed + chunk.length > W;
    }
    cov_.prefill |= prefill;
    cov_.decode |= decode_token;
    cov_.mixed_step |= prefill && decode_token;
  }

  void fork(const Call& call) {
    const int n = call.count, B = s_.block_size;
    cov_.fork = true;
    forked_[size_t(call.sequence)] = forked_[size_t(call.parent)] = 1;
    on_host_[size_t(call.sequence)] = on_host_[size_t(call.parent)] && n > 0;  // shares them
    cov_.fork_mid_block |= B > 0 && n % B != 0;
    if (B > 0 && n % B != 0) shares_partial_block_[size_t(call.sequence)] = 1;
    if (B > 0 && n % B != 0) shares_partial_block_[size_t(call.parent)] = 1;
    cov_.fork_at_boundary |= B > 0 && n % B == 0;
  }

  void truncate(const Call& call) {
    const int before = model_.at(call.sequence).held(), after = before - call.count;
    const int B = s_.block_size;
    cov_.truncate = true;
    cov_.rollback |= call.count > 0;
    cov_.truncate_to_zero |= after == 0 && before > 0;
    if (after == 0) on_host_[size_t(call.sequence)] = false;  // no blocks left
    cov_.truncate_across_blocks |= B > 0 && before / B != after / B;
  }

  // An offload that moves blocks: the sequence holds tokens that no
  // offload since its last step moved already.
  void offload(const Call& call) {
    const size_t i = size_t(call.sequence);
    cov_.offload |= model_.at(call.sequence).held() > 0 && !on_host_[i];
    on_host_[i] = model_.at(call.sequence).held() > 0;
  }

  // A restore that changes something: the sequence was fed since its save,
  // or its cells differ from the saved ones.
  void restore(const Call& call) {
    const SequenceModel& seq = model_.at(call.sequence);
    const bool changes =
        seq.saved && (*seq.saved != seq.cells || seq.fed != fed_at_save_[size_t(call.sequence)]);
    cov_.restore |= changes;
    restored_[size_t(call.sequence)] = changes;
  }

  void abort(const Call& call) {
    cov_.abort = true;
    const std::vector<int32_t>& stream = s_.sequences[size_t(call.sequence)];
    const int fed = model_.at(call.sequence).fed;
    aborted_.emplace_back(stream.begin(), stream.begin() + fed);
  }

  void verify(const Call& call) {
    const int before = model_.at(call.sequence).held();
    const int after = before - (call.count - call.accepted);
    const int B = s_.block_size;
    cov_.verify = true;
    cov_.rollback |= call.accepted < call.count;
    cov_.verify_reject_all |= call.accepted == 0;
    cov_.verify_accept_all |= call.accepted == call.count;
    cov_.verify_one_draft |= call.count == 1;
    cov_.verify_across_blocks |= B > 0 && (before + B - 1) / B != (after + B - 1) / B;
    cov_.verify_forked |= forked_[size_t(call.sequence)];
  }

  // Cells below, inside and above [p0, p1) before the call.
  struct Split {
    int below = 0, inside = 0, above = 0;
  };
  Split split(const Call& call) const {
    Split out;
    for (int32_t p : model_.at(call.sequence).cells) {
      (p < call.p0 ? out.below : p < call.p1 ? out.inside : out.above) += 1;
    }
    return out;
  }

  void erase(const Call& call) {
    const Split cells = split(call);
    cov_.erase = true;
    if (cells.inside > 0 && cells.below > 0 && cells.above > 0) {
      pending_erase_[size_t(call.sequence)] = true;
    }
  }

  static bool shares_a_position(const SequenceModel& seq) {
    const std::vector<int32_t> sorted = sorted_positions(seq);
    return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
  }

  void shift(const Call& call) {
    const Split cells = split(call);
    const size_t i = size_t(call.sequence);
    cov_.shifts_in_a_row |= cov_.shift && shifted_[i];
    cov_.shift = true;
    shifted_[i] = true;
    pending_erase_[i] = false;  // counted only when no shift follows the erase
    if (cells.inside == 0) return;
    cov_.shift_up |= call.delta > 0;
    if (cells.above > 0) pending_shift_[i] = true;
  }

  const Scenario& s_;
  Coverage& cov_;
  ScheduleModel model_;
  std::vector<char> one_token_chunk_;          // [sequence] had a one-token chunk
  std::vector<char> shifted_;                  // [sequence] shifted before
  std::vector<char> forked_;                   // [sequence] a fork's parent or child
  std::vector<int> started_;                   // sequences started so far, in call order
  std::vector<char> shares_partial_block_;     // [sequence] a mid-block fork's parent or child
  std::vector<std::vector<int32_t>> aborted_;  // [abort] the tokens the aborted sequence fed
  std::vector<char> pending_erase_;  // [sequence] erased in the middle, not fed or shifted since
  std::vector<char> pending_shift_;  // [sequence] shifted in the middle, not fed since
  std::vector<char> on_host_;        // [sequence] an offload moved its blocks, no step since
  std::vector<char> restored_;       // [sequence] a restore changed its cells, no step since
  std::vector<int> fed_at_save_;     // [sequence] stream tokens fed at its last save
  bool finished_since_reset_ = false;
};

}  // namespace

FeatureMask drawn_features(const Coverage& c) {
  const auto drawn = [&](Feature f) -> bool {
    switch (f) {
      case Feature::kPrefixHit:
        return c.prefix_cache && c.shared_prompt;
      case Feature::kKeyPartition:
        return c.shared_prompt_across_keys;
      case Feature::kCopyOnWrite:
        return c.cow_write;
      case Feature::kEviction:
        return c.prefix_cache;
      case Feature::kRollback:
        return c.rollback;
      case Feature::kOffload:
        return c.offload;
      case Feature::kCount:
        break;
    }
    return false;
  };
  FeatureMask mask = 0;
  for (const FeatureRow& row : feature_rows()) {
    if (drawn(row.feature)) mask |= feature_bit(row.feature);
  }
  return mask;
}

Coverage coverage(const Scenario& s) {
  Coverage cov;
  model_tags(s, cov);
  CoverageWalk(s, cov).walk();
  return cov;
}

}  // namespace kvcheck::rcgen

namespace kvcheck {
void showValue(const Scenario& scenario, std::ostream& os) {
  os << "size " << scenario.size() << "\n" << scenario.to_text();
}
}  // namespace kvcheck
