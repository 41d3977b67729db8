#include "properties/repro/shrink.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>
#include <unordered_set>

#include "properties/runner.h"
#include "properties/schedule/operation.h"

namespace kvcheck {

namespace {

// [call][chunk]: the index of the chunk's first token in its sequence.
std::vector<std::vector<int>> chunk_offsets(const Scenario& s) {
  std::vector<int> fed(s.sequences.size(), 0);
  std::vector<std::vector<int>> offsets(s.calls.size());
  for (size_t c = 0; c < s.calls.size(); ++c) {
    for (const ChunkSpec& chunk : s.calls[c].chunks) {
      const size_t q = size_t(chunk.sequence);
      offsets[c].push_back(q < fed.size() ? fed[q] : 0);
      if (q < fed.size()) fed[q] += chunk.length;
    }
  }
  return offsets;
}

void erase_tokens(Scenario& s, int sequence, int from, int count) {
  std::vector<int32_t>& tokens = s.sequences[size_t(sequence)];
  const int end = std::min<int>(from + count, static_cast<int>(tokens.size()));
  if (from >= end) return;
  tokens.erase(tokens.begin() + from, tokens.begin() + end);
}

// Drops sequence k: every call that names it (a fork from it too; normalize
// then drops the child, which is never started) and its chunks, and
// renumbers the later sequences, through each operation's syntax.
void drop_sequence(Scenario& s, int k) {
  std::vector<Call> calls;
  for (Call call : s.calls) {
    bool names_k = false;
    for (const Argument& a : operation(call.kind).syntax) {
      if (!a.sequence) continue;
      int& sequence = call.*a.field;
      names_k |= sequence == k;
      if (sequence > k) --sequence;
    }
    if (names_k) continue;
    std::erase_if(call.chunks, [k](const ChunkSpec& c) { return c.sequence == k; });
    if (call.kind == Call::Kind::kStep && call.chunks.empty()) continue;
    for (ChunkSpec& chunk : call.chunks) {
      if (chunk.sequence > k) --chunk.sequence;
    }
    calls.push_back(std::move(call));
  }
  s.calls = std::move(calls);
  s.sequences.erase(s.sequences.begin() + k);
  if (size_t(k) < s.cache_keys.size()) s.cache_keys.erase(s.cache_keys.begin() + k);
}

// Tokens nothing feeds and sequences nothing starts only perturb the derived
// seeds (scenario_digest); they are dropped from every candidate. Each call's
// counts are clamped to what its sequences hold by then (its operation's
// `normalize`), so a shorter step keeps them valid.
void normalize(Scenario& s) {
  std::vector<int> fed(s.sequences.size(), 0);
  std::vector<bool> started(s.sequences.size(), false);
  for (const Call& call : s.calls) {
    if (operation(call.kind).starts && size_t(call.sequence) < started.size()) {
      started[size_t(call.sequence)] = true;
    }
    for (const ChunkSpec& chunk : call.chunks) {
      if (size_t(chunk.sequence) < fed.size()) fed[size_t(chunk.sequence)] += chunk.length;
    }
  }
  for (size_t q = 0; q < s.sequences.size(); ++q) {
    if (s.sequences[q].size() > size_t(fed[q])) s.sequences[q].resize(size_t(fed[q]));
  }
  ContentLengths lengths{std::vector<int>(s.sequences.size(), 0),
                         std::vector<int>(s.sequences.size(), 0)};
  std::vector<Call> kept;  // [call] those that still do something
  for (Call& call : s.calls) {
    const auto clamp = operation(call.kind).normalize;
    if (!clamp || clamp(call, lengths)) kept.push_back(std::move(call));
  }
  s.calls = std::move(kept);
  for (int k = static_cast<int>(s.sequences.size()) - 1; k >= 0; --k) {
    if (!started[size_t(k)]) drop_sequence(s, k);
  }
}

// The most sequences running at once, and the most cells one held, on
// the harness's model of the (valid) scenario.
std::pair<int, int> peak_rows_and_length(const Scenario& s) {
  ScheduleModel model(s);
  int peak = 0, longest = 0;
  for (const Call& call : s.calls) {
    operation(call.kind).apply(model, call);
    peak = std::max(peak, model.running);
    for (const SequenceModel& seq : model.sequences) longest = std::max(longest, seq.held());
  }
  return {peak, longest};
}

class CandidateList {
 public:
  explicit CandidateList(const Scenario& base) : base_(base) {}

  void add(Scenario candidate) {
    normalize(candidate);
    if (!candidate.validate().empty()) return;
    if (!(key(candidate) < key(base_))) return;
    list_.push_back(std::move(candidate));
  }

  std::vector<Scenario> sorted() && {
    std::vector<std::pair<std::pair<int, int64_t>, size_t>> order;
    for (size_t i = 0; i < list_.size(); ++i) order.push_back({key(list_[i]), i});
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Scenario> out;
    out.reserve(list_.size());
    for (const auto& [k, i] : order) out.push_back(std::move(list_[i]));
    return out;
  }

  static std::pair<int, int64_t> key(const Scenario& s) { return {s.size(), shrink_complexity(s)}; }

 private:
  const Scenario& base_;
  std::vector<Scenario> list_;
};

// A step's chunks: dropped (with their tokens), shortened from the end or
// by its first token; the step merged with the next one.
void step_candidates(const Scenario& s, size_t i, const std::vector<int>& offsets,
                     CandidateList& out) {
  const Call& call = s.calls[i];
  for (size_t j = 0; j < call.chunks.size(); ++j) {
    const ChunkSpec chunk = call.chunks[j];
    if (call.chunks.size() > 1) {
      Scenario c = s;
      erase_tokens(c, chunk.sequence, offsets[j], chunk.length);
      c.calls[i].chunks.erase(c.calls[i].chunks.begin() + std::ptrdiff_t(j));
      out.add(std::move(c));
    }
    for (int length : smaller_values(chunk.length, 1)) {
      // Keep the chunk's first tokens, or (for one token less) its last ones.
      Scenario tail_cut = s;
      erase_tokens(tail_cut, chunk.sequence, offsets[j] + length, chunk.length - length);
      tail_cut.calls[i].chunks[j].length = length;
      out.add(std::move(tail_cut));
      if (length == chunk.length - 1) {
        Scenario head_cut = s;
        erase_tokens(head_cut, chunk.sequence, offsets[j], 1);
        head_cut.calls[i].chunks[j].length = length;
        out.add(std::move(head_cut));
      }
    }
  }
  // Merge with the next step: one call fewer, the same tokens fed.
  if (i + 1 < s.calls.size() && s.calls[i + 1].kind == Call::Kind::kStep) {
    Scenario c = s;
    std::vector<ChunkSpec>& merged = c.calls[i].chunks;
    for (const ChunkSpec& next : s.calls[i + 1].chunks) {
      auto same = std::find_if(merged.begin(), merged.end(),
                               [&](const ChunkSpec& m) { return m.sequence == next.sequence; });
      if (same != merged.end()) {
        same->length += next.length;
      } else {
        merged.push_back(next);
      }
    }
    c.calls.erase(c.calls.begin() + std::ptrdiff_t(i + 1));
    out.add(std::move(c));
  }
}

// Call i dropped (a step's tokens go with it so later steps feed the same
// ones), or simpler as its operation declares; a step's chunks.
void call_candidates(const Scenario& s, size_t i, const std::vector<int>& offsets,
                     CandidateList& out) {
  const Call& call = s.calls[i];
  if (call.kind == Call::Kind::kStart) return;  // goes with its sequence
  Scenario dropped = s;
  for (size_t j = call.chunks.size(); j-- > 0;) {
    erase_tokens(dropped, call.chunks[j].sequence, offsets[j], call.chunks[j].length);
  }
  dropped.calls.erase(dropped.calls.begin() + std::ptrdiff_t(i));
  out.add(std::move(dropped));
  if (const Operation& op = operation(call.kind); op.simpler) {
    for (const Call& simpler : op.simpler(call)) {
      Scenario c = s;
      c.calls[i] = simpler;
      out.add(std::move(c));
    }
  }
  if (call.kind == Call::Kind::kStep) step_candidates(s, i, offsets, out);
}

void schedule_candidates(const Scenario& s, CandidateList& out) {
  const int n = static_cast<int>(s.sequences.size());
  // Whole sequences: keep one, or drop one.
  if (n > 1) {
    for (int keep = 0; keep < n; ++keep) {
      Scenario c = s;
      for (int k = n - 1; k >= 0; --k) {
        if (k != keep) drop_sequence(c, k);
      }
      out.add(std::move(c));
    }
  }
  for (int k = 0; k < n; ++k) {
    Scenario c = s;
    drop_sequence(c, k);
    out.add(std::move(c));
  }
  for (size_t cut = 1; cut < s.calls.size(); ++cut) {
    Scenario c = s;
    c.calls.resize(cut);
    out.add(std::move(c));
  }
  const std::vector<std::vector<int>> offsets = chunk_offsets(s);
  for (size_t i = 0; i < s.calls.size(); ++i) call_candidates(s, i, offsets[i], out);
}

// A smaller vocabulary: ids taken modulo the new size, or ranked.
void vocabulary_candidates(const Scenario& s, CandidateList& out) {
  const Config& config = s.config;
  std::set<int32_t> distinct;
  for (const auto& tokens : s.sequences) distinct.insert(tokens.begin(), tokens.end());
  for (int v : smaller_values(config.vocab, 1, {2})) {
    Scenario c = s;
    c.config.vocab = v;
    for (auto& tokens : c.sequences) {
      for (int32_t& t : tokens) t %= v;
    }
    out.add(std::move(c));
  }
  if (!distinct.empty() && static_cast<int>(distinct.size()) < config.vocab) {
    Scenario c = s;
    c.config.vocab = static_cast<int>(distinct.size());
    for (auto& tokens : c.sequences) {
      for (int32_t& t : tokens) {
        t = static_cast<int32_t>(std::distance(distinct.begin(), distinct.find(t)));
      }
    }
    out.add(std::move(c));
  }
}

// Capacity, max_pos, rows, the dtype and the storage settings.
void storage_candidates(const Scenario& s, CandidateList& out) {
  const Config& config = s.config;
  const auto [peak_rows, longest] = peak_rows_and_length(s);
  for (int v : smaller_values(s.capacity, std::max(1, longest))) {
    Scenario c = s;
    c.capacity = v;
    out.add(std::move(c));
  }
  if (!s.model && config.max_pos > s.capacity) {
    Scenario c = s;
    c.config.max_pos = s.capacity;
    out.add(std::move(c));
  }
  for (int v : smaller_values(s.max_rows, std::max(1, peak_rows))) {
    Scenario c = s;
    c.max_rows = v;
    out.add(std::move(c));
  }
  if (s.kv_dtype != KvDtype::kF32) {
    Scenario c = s;
    c.kv_dtype = KvDtype::kF32;
    out.add(std::move(c));
  }
  // No prefix cache (its flushes go with it), contiguous storage, smaller
  // blocks, the default pool (the largest: nothing runs dry).
  const auto without_prefix_cache = [](Scenario& c) {
    c.prefix_cache = c.prompt_logits = false;
    std::erase_if(c.calls, [](const Call& call) { return call.kind == Call::Kind::kFlush; });
  };
  if (s.prefix_cache) {
    Scenario c = s;
    without_prefix_cache(c);
    out.add(std::move(c));
  }
  if (s.prompt_logits) {  // the NaN contract: reused rows unchecked
    Scenario c = s;
    c.prompt_logits = false;
    out.add(std::move(c));
  }
  // No cache keys, then each key smaller (0: none).
  if (!s.cache_keys.empty()) {
    Scenario c = s;
    c.cache_keys.clear();
    out.add(std::move(c));
    for (size_t i = 0; i < s.cache_keys.size(); ++i) {
      for (int v : smaller_values(int(s.cache_keys[i]), 0)) {
        Scenario k = s;
        k.cache_keys[i] = uint32_t(v);
        out.add(std::move(k));
      }
    }
  }
  for (int v : smaller_values(s.block_size, 0, {1, 2})) {
    Scenario c = s;
    c.block_size = v;
    if (v == 0) c.pool_blocks = 0, without_prefix_cache(c);
    out.add(std::move(c));
  }
  if (s.pool_blocks > 0) {
    // The default pool (it never runs dry), or a smaller one (a refusal
    // then comes with fewer tokens).
    Scenario c = s;
    c.pool_blocks = 0;
    out.add(std::move(c));
    for (int v : smaller_values(s.pool_blocks, 1)) {
      Scenario d = s;
      d.pool_blocks = v;
      out.add(std::move(d));
    }
  }
}

void model_candidates(const Scenario& s, CandidateList& out) {
  const Config& config = s.config;
  // A checkpoint's config is its files' (--model): only the engine options
  // shrink (Scenario::validate drops any other candidate too).
  const bool fixed_config = s.model != nullptr;
  const bool llama = config.family == Family::kLlama;
  const auto with = [&](auto edit) {
    if (fixed_config) return;
    Scenario c = s;
    edit(c.config);
    out.add(std::move(c));
  };
  for (int v : smaller_values(config.n_layers, 1)) with([&](Config& c) { c.n_layers = v; });
  // Query heads and KV heads together: every (h, kv) with kv dividing h.
  for (int h : smaller_values(config.n_heads + 1, 1, {2, 4})) {
    for (int kv : smaller_values(config.n_kv_heads + 1, 1, {2, 4, h})) {
      if (h % kv != 0 || (h == config.n_heads && kv == config.n_kv_heads)) continue;
      with([&](Config& c) { c.n_heads = h, c.n_kv_heads = kv; });
    }
  }
  const int dim_step = llama ? 2 : 1;  // RoPE rotates pairs
  for (int v : smaller_values(config.head_dim, dim_step, {2, 4})) {
    if (v % dim_step == 0) with([&](Config& c) { c.head_dim = v; });
  }
  for (int v : smaller_values(config.d_model, 1, {2, 4})) with([&](Config& c) { c.d_model = v; });
  for (int v : smaller_values(config.d_ff, 1, {2, 4})) with([&](Config& c) { c.d_ff = v; });
  if (config.qkv_bias) with([](Config& c) { c.qkv_bias = false; });
  // No window, smaller windows (down to 1), every layer windowed.
  for (int v : smaller_values(config.sliding_window, 0, {1, 2})) {
    with([&](Config& c) {
      c.sliding_window = v;
      if (v == 0) c.sliding_window_pattern = 0;
    });
  }
  if (config.sliding_window_pattern != 0) with([](Config& c) { c.sliding_window_pattern = 0; });

  vocabulary_candidates(s, out);
  storage_candidates(s, out);
}

void token_candidates(const Scenario& s, CandidateList& out) {
  constexpr int kMaxSingleTokenEdits = 64;
  int total = 0;
  for (const auto& tokens : s.sequences) total += static_cast<int>(tokens.size());
  const auto zero = [&](int only_sequence, int only_token) {
    Scenario c = s;
    bool changed = false;
    for (size_t q = 0; q < c.sequences.size(); ++q) {
      if (only_sequence >= 0 && int(q) != only_sequence) continue;
      for (size_t i = 0; i < c.sequences[q].size(); ++i) {
        if (only_token >= 0 && int(i) != only_token) continue;
        changed |= c.sequences[q][i] != 0;
        c.sequences[q][i] = 0;
      }
    }
    if (changed) out.add(std::move(c));
  };
  zero(-1, -1);
  for (size_t q = 0; q < s.sequences.size() && s.sequences.size() > 1; ++q) zero(int(q), -1);
  if (total > kMaxSingleTokenEdits) return;
  for (size_t q = 0; q < s.sequences.size(); ++q) {
    for (size_t i = 0; i < s.sequences[q].size(); ++i) zero(int(q), int(i));
  }
}

}  // namespace

int64_t shrink_complexity(const Scenario& s) {
  const Config& c = s.config;
  int64_t total = int64_t(c.d_model) + c.d_ff + c.head_dim + c.n_kv_heads + c.vocab + c.max_pos +
                  s.capacity + s.max_rows + s.block_size + s.pool_blocks + c.sliding_window +
                  c.sliding_window_pattern + (s.prefix_cache ? 1 : 0) + (c.qkv_bias ? 1 : 0) +
                  (s.kv_dtype != KvDtype::kF32 ? 1 : 0);
  for (const auto& tokens : s.sequences) {
    total += int64_t(tokens.size());
    for (int32_t t : tokens) total += std::max<int32_t>(t, 0);
  }
  // A call's parameters: smaller counts, positions and deltas are simpler
  // (a range's end counts up to max_pos, past which it changes nothing).
  for (const Call& call : s.calls) {
    total += int64_t(std::abs(call.count)) + std::abs(call.p0) +
             std::min(std::abs(call.p1), c.max_pos) + std::abs(call.delta);
  }
  for (uint32_t key : s.cache_keys) total += key != 0 ? 1 + key : 0;
  return total;
}

std::vector<Scenario> shrink_candidates(const Scenario& scenario) {
  CandidateList out(scenario);
  schedule_candidates(scenario, out);
  model_candidates(scenario, out);
  token_candidates(scenario, out);
  return std::move(out).sorted();
}

ShrinkResult shrink_scenario(const Scenario& failing, const Verdict& verdict,
                             const FailureCheck& still_fails, const ShrinkOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  ShrinkResult result;
  result.scenario = failing;
  result.verdict = verdict;
  result.size_before = failing.size();
  // Candidates that held, by digest: later rounds list many of them again.
  std::unordered_set<uint64_t> held;
  const auto out_of_budget = [&] {
    if (result.evaluations >= options.max_evaluations) return true;
    result.stopped_by_time =
        std::chrono::duration<double>(Clock::now() - start).count() >= options.max_seconds;
    return result.stopped_by_time;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (Scenario& candidate : shrink_candidates(result.scenario)) {
      if (out_of_budget()) {
        result.size_after = result.scenario.size();
        return result;
      }
      const uint64_t digest = scenario_digest(candidate);
      if (held.count(digest)) continue;
      ++result.evaluations;
      std::optional<Verdict> failed = still_fails(candidate);
      if (!failed) {
        held.insert(digest);
        continue;
      }
      result.scenario = std::move(candidate);
      result.verdict = std::move(*failed);
      ++result.accepted;
      if (options.on_accept) options.on_accept(result.scenario, result.evaluations);
      progress = true;
      break;
    }
  }
  result.fixed_point = true;
  result.size_after = result.scenario.size();
  return result;
}

std::optional<ShrinkResult> shrink_failure(const Scenario& failing, Property property,
                                           const EngineUnderTest& subject,
                                           const ShrinkOptions& options) {
  const FailureCheck check = [&](const Scenario& s) -> std::optional<Verdict> {
    Verdict v = check_property(property, s, subject);
    if (v.passed) return std::nullopt;
    return v;
  };
  const std::optional<Verdict> initial = check(failing);
  if (!initial) return std::nullopt;
  return shrink_scenario(failing, *initial, check, options);
}

}  // namespace kvcheck
