#include "properties/runner.h"

#include "model/status.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <utility>

#include "model/rng.h"
#include "properties/feature_use.h"
#include "properties/schedule/operation.h"

namespace kvcheck {

ScenarioRunner::ScenarioRunner(const Scenario& scenario, const Config& config,
                               const Weights& weights, const EngineFactory& factory)
    : scenario_(scenario),
      engine_(factory(config, weights, scenario.engine_options())),
      vocab_(config.vocab),
      sequences_(scenario.sequences.size()),
      logits_(scenario.sequences.size()),
      reused_(scenario.sequences.size()),
      hit_(scenario.sequences.size()) {}

RunResult ScenarioRunner::run(const CallHook& hook) {
  RunResult result = run_calls(hook);
  result.logits = logits_;
  result.reused = reused_;
  result.hit = hit_;
  return result;
}

RunResult ScenarioRunner::run_and_take_logits(const CallHook& hook, const Meanwhile& meanwhile) {
  RunResult result = run_calls(hook, meanwhile);
  result.logits = std::move(logits_);
  result.reused = reused_;
  result.hit = hit_;
  logits_.assign(result.logits.size(), {});
  return result;
}

bool ScenarioRunner::ended(const RunResult& result) {
  return result.engine_failed || result.refused || result.stopped;
}

void ScenarioRunner::clear_failure(RunResult& result) {
  result.engine_failed = result.threw = false;
  result.failed_call = -1;
  result.error_kind = EngineError::Kind::kBadBatch;
  result.error_message.clear();
}

void ScenarioRunner::record_failure(RunResult& result, int call, const EngineError* error,
                                    const char* what) {
  result.engine_failed = true;
  result.threw = error == nullptr;
  result.failed_call = call;
  if (error != nullptr) result.error_kind = error->kind();
  result.error_message = what;
}

RunResult ScenarioRunner::run_calls(const CallHook& hook, const Meanwhile& meanwhile) {
  // Reserving every sequence's logits up front keeps the step loop free of
  // reallocation.
  const SchedulePlan plan = plan_schedule(scenario_);
  for (size_t s = 0; s < logits_.size(); ++s)
    logits_[s].reserve(size_t(plan.fed[s]) * size_t(vocab_));
  // Only an explicitly sized pool may run dry, by the scenario or by a
  // backend option; its refusals are data the schedule cannot predict.
  may_run_dry_ = scenario_.pool_blocks > 0 || engine_->options().pool_blocks > 0;
  pipeline_ = engine_->pipeline();
  defer_ = pipeline_ != nullptr && !hook;  // a hook reads the engine after every call
  meanwhile_ = meanwhile ? &meanwhile : nullptr;
  RunResult result;
  for (size_t c = 0; c < scenario_.calls.size() && !ended(result); ++c) {
    const Call& call = scenario_.calls[c];
    if (waits_for_posted(call)) {
      run_meanwhile();
      collect_posted(result);
      if (ended(result)) break;
    }
    run_call(call, static_cast<int>(c), result);
    if (!ended(result) && hook && !hook(static_cast<int>(c), *this)) result.stopped = true;
  }
  finish_run(result);
  return result;
}

void ScenarioRunner::run_call(const Call& call, int call_index, RunResult& result) {
  // The state before a step that may be refused; a pipeline reads it with
  // the step instead.
  const bool judged_here = may_run_dry_ && call.kind == Call::Kind::kStep && !posts(call);
  const std::string before = judged_here ? state_digest() : std::string();
  try {
    const Observed observed = observe_before(call);
    execute(call, call_index);
    if (observes(call)) observe_after(call, observed);
  } catch (const EngineError& e) {
    if (judged_here && e.kind() == EngineError::Kind::kCapacity)
      settle_refusal(result, call_index, e, before, state_digest());
    else
      record_failure(result, call_index, &e, e.what());
  } catch (const InputError&) {
    throw;  // the engine could not be built or configured: check_property reports it
  } catch (const std::exception& e) {
    record_failure(result, call_index, nullptr, e.what());
  }
  // Without deferring, a posted (watched) step is read at once, as a call
  // that waits.
  if (!defer_ && !posted_.empty() && !ended(result)) collect_posted(result);
}

void ScenarioRunner::execute(const Call& call, int call_index) {
  operation(call.kind).run(*this, call, call_index);
}

void ScenarioRunner::feed(const Call& call, int call_index) {
  std::vector<int> fed_at = fill_batch(call);
  if (!posts(call)) {
    engine_->step(batch_, step_logits_);
    file_step(call, fed_at);
  } else if (may_run_dry_) {
    std::vector<size_t> running = running_sequences();
    pipeline_->post_watched_step(batch_, engine_ids(running));
    posted_.push_back({call_index, std::move(fed_at), std::move(running)});
  } else {
    pipeline_->post_step(batch_);
    posted_.push_back({call_index, std::move(fed_at), {}});
  }
  advance(call);
}

std::vector<int> ScenarioRunner::fill_batch(const Call& call) {
  batch_.clear();
  std::vector<int> fed_at;  // [chunk]
  for (const ChunkSpec& chunk : call.chunks) {
    const size_t s = size_t(chunk.sequence);
    const std::span<const int32_t> tokens(scenario_.sequences[s]);
    const RunnerSequence& seq = sequences_[s];
    batch_.push_back({seq.id, tokens.subspan(size_t(seq.fed), size_t(chunk.length))});
    fed_at.push_back(seq.fed);
  }
  return fed_at;
}

void ScenarioRunner::advance(const Call& call) {
  for (const ChunkSpec& chunk : call.chunks) {
    RunnerSequence& seq = sequences_[size_t(chunk.sequence)];
    seq.fed += chunk.length;
    seq.held += chunk.length;
    const int next = next_position(seq.cells);
    for (int i = 0; i < chunk.length; ++i) seq.cells.push_back(next + i);
  }
}

void ScenarioRunner::file_step(const Call& call, std::span<const int> fed_at) {
  // Logits come back [sum of n][V] in batch order.
  size_t at = 0;
  for (size_t i = 0; i < call.chunks.size(); ++i) {
    const ChunkSpec& chunk = call.chunks[i];
    const size_t s = size_t(chunk.sequence);
    const size_t count = size_t(chunk.length) * size_t(vocab_);
    logits_[s].insert(logits_[s].end(), step_logits_.begin() + std::ptrdiff_t(at),
                      step_logits_.begin() + std::ptrdiff_t(at + count));
    at += count;
    // A prefix hit: the chunk's first k tokens were not computed.
    const int k = engine_->reused(sequences_[s].id);
    if (k > 0) note_used(Feature::kPrefixHit);
    if (k < 0 || k >= chunk.length) {
      throw std::runtime_error("reused: the engine says " + std::to_string(k) +
                               " tokens of a chunk of " + std::to_string(chunk.length) +
                               " came from the prefix cache; expected 0.." +
                               std::to_string(chunk.length - 1));
    }
    reused_[s].resize(size_t(fed_at[i]) + size_t(chunk.length), false);
    hit_[s].resize(reused_[s].size(), false);
    std::fill_n(hit_[s].begin() + fed_at[i], k, true);
    // Prompt logits on a hit: the reused rows are checked like any other.
    if (!scenario_.prompt_logits) std::fill_n(reused_[s].begin() + fed_at[i], k, true);
  }
}

void ScenarioRunner::settle_refusal(RunResult& result, int call, const EngineError& e,
                                    const std::string& before, const std::string& after) {
  if (after == before) {
    result.refused = true;
    result.refused_call = call;
    result.error_message = e.what();
    return;
  }
  const std::string what =
      std::string(e.what()) +
      "\nand the refused step changed the engine's state:\n  before: " + before +
      "\n  after:  " + after;
  record_failure(result, call, &e, what.c_str());
}

std::vector<size_t> ScenarioRunner::running_sequences() const {
  std::vector<size_t> running;  // [running sequences] scenario order
  for (size_t s = 0; s < sequences_.size(); ++s)
    if (sequences_[s].running) running.push_back(s);
  return running;
}

std::vector<SequenceId> ScenarioRunner::engine_ids(std::span<const size_t> sequences) const {
  std::vector<SequenceId> ids;  // [sequences]
  for (const size_t s : sequences) ids.push_back(sequences_[s].id);
  return ids;
}

std::string ScenarioRunner::state_digest() const {
  const std::vector<size_t> running = running_sequences();
  return digest(read_state(*engine_, engine_ids(running)), running);
}

std::string ScenarioRunner::digest(const EngineState& state,
                                   std::span<const size_t> sequences) const {
  std::string out;
  if (const std::optional<PoolReport>& r = state.pool) {
    out += "free " + std::to_string(r->free) + " used " + std::to_string(r->used) + " cached " +
           std::to_string(r->cached);
    if (r->host_total > 0) {
      out += "; host free " + std::to_string(r->host_free) + " used " +
             std::to_string(r->host_used) + " cached " + std::to_string(r->host_cached);
    }
    out += "; refcounts";
    for (const int c : r->refcounts) out += " " + std::to_string(c);
    for (const auto& [id, table] : r->tables) {
      out += "; table of " + std::to_string(id) + ":";
      for (const int b : table) out += " " + std::to_string(b);
    }
  } else {
    out += "(no pool report)";
  }
  for (size_t k = 0; k < sequences.size() && k < state.lengths.size(); ++k)
    out += "; length of s" + std::to_string(sequences[k]) + " " + std::to_string(state.lengths[k]);
  return out;
}

RunResult run_scenario(const Scenario& scenario, const Weights& weights,
                       const EngineFactory& factory, const CallHook& hook,
                       const Meanwhile& meanwhile) {
  ScenarioRunner runner(scenario, scenario.config, weights, factory);
  return runner.run_and_take_logits(hook, meanwhile);
}

Scenario solo_scenario(const Scenario& base, std::span<const int32_t> tokens,
                       const std::vector<int>& chunk_lengths, int leading_dummies,
                       uint64_t dummy_seed) {
  Scenario solo;
  solo.config = base.config;
  solo.weight_seed = base.weight_seed;
  solo.model = base.model;
  solo.capacity = base.capacity;
  solo.max_rows = base.max_rows;
  solo.kv_dtype = base.kv_dtype;
  // Paged like the scenario, but a solo run is a reference: a pool that
  // never runs dry and no prefix cache (it computes every token it is fed).
  solo.block_size = base.block_size;
  solo.sequences.emplace_back(tokens.begin(), tokens.end());
  SplitMix64 rng(dummy_seed);
  for (int d = 0; d < leading_dummies; ++d) {
    std::vector<int32_t>& dummy = solo.sequences.emplace_back();  // [capacity]
    for (int i = 0; i < base.capacity; ++i) {
      dummy.push_back(static_cast<int32_t>(rng.below(uint64_t(base.config.vocab))));
    }
    solo.calls.push_back(Call::start(d + 1));
  }
  solo.calls.push_back(Call::start(0));
  int dummy_fed = 0;  // every dummy is fed alike
  for (int length : chunk_lengths) {
    std::vector<ChunkSpec> chunks;
    if (dummy_fed < base.capacity) {
      for (int d = 0; d < leading_dummies; ++d) chunks.push_back({d + 1, 1});
      if (leading_dummies > 0) ++dummy_fed;
    }
    chunks.push_back({0, length});
    solo.calls.push_back(Call::step(std::move(chunks)));
  }
  return solo;
}

uint64_t scenario_digest(const Scenario& scenario) {
  return fnv1a64(scenario.to_text());
}

std::optional<size_t> first_bit_difference(std::span<const float> a, std::span<const float> b) {
  const size_t n = std::min(a.size(), b.size());
  if (n == 0 || std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0) {
    if (a.size() == b.size()) return std::nullopt;
    return n;
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return i;
  }
  return n;
}

std::string float_with_bits(float value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9g (0x%08x)", static_cast<double>(value),
                static_cast<unsigned>(std::bit_cast<uint32_t>(value)));
  return buffer;
}

}  // namespace kvcheck
