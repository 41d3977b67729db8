#include "properties/runner.h"

#include "model/status.h"

#include <bit>
#include <cstdio>
#include <cstring>

#include "model/rng.h"

namespace kvcheck {

SchedulePlan plan_schedule(const Scenario& scenario) {
  const size_t n = scenario.sequences.size();
  SchedulePlan plan;
  plan.fed.assign(n, 0);
  plan.chunks.assign(n, {});
  plan.call_of_position.assign(n, {});
  plan.start_call.assign(n, -1);
  plan.end_call.assign(n, -1);
  plan.shared_step.assign(n, false);
  std::vector<bool> running(n, false);  // [sequence]
  for (size_t c = 0; c < scenario.calls.size(); ++c) {
    const Call& call = scenario.calls[c];
    const int ci = static_cast<int>(c);
    switch (call.kind) {
      case Call::Kind::kStart:
        plan.start_call[size_t(call.sequence)] = ci;
        running[size_t(call.sequence)] = true;
        break;
      case Call::Kind::kStep:
        for (const ChunkSpec& chunk : call.chunks) {
          const size_t s = size_t(chunk.sequence);
          plan.chunks[s].push_back(chunk.length);
          plan.fed[s] += chunk.length;
          plan.call_of_position[s].resize(size_t(plan.fed[s]), ci);
          if (call.chunks.size() > 1) plan.shared_step[s] = true;
        }
        break;
      case Call::Kind::kFinish:
        plan.end_call[size_t(call.sequence)] = ci;
        running[size_t(call.sequence)] = false;
        break;
      case Call::Kind::kReset:
        for (size_t s = 0; s < n; ++s) {
          if (running[s]) plan.end_call[s] = ci;
          running[s] = false;
        }
        break;
    }
  }
  return plan;
}

ScenarioRunner::ScenarioRunner(const Scenario& scenario, const Config& config,
                               const Weights& weights, const EngineFactory& factory)
    : scenario_(scenario),
      engine_(factory(config, weights, scenario.engine_options())),
      vocab_(config.vocab),
      ids_(scenario.sequences.size(), -1),
      running_(scenario.sequences.size(), false),
      fed_(scenario.sequences.size(), 0),
      logits_(scenario.sequences.size()) {}

void ScenarioRunner::execute(const Call& call) {
  switch (call.kind) {
    case Call::Kind::kStart:
      ids_[size_t(call.sequence)] = engine_->start();
      running_[size_t(call.sequence)] = true;
      break;
    case Call::Kind::kStep: {
      batch_.clear();
      for (const ChunkSpec& chunk : call.chunks) {
        const size_t s = size_t(chunk.sequence);
        const std::span<const int32_t> tokens(scenario_.sequences[s]);
        batch_.push_back({ids_[s], tokens.subspan(size_t(fed_[s]), size_t(chunk.length))});
      }
      engine_->step(batch_, step_logits_);
      // Logits come back [sum of n][V] in batch order.
      size_t at = 0;
      for (const ChunkSpec& chunk : call.chunks) {
        const size_t s = size_t(chunk.sequence);
        const size_t count = size_t(chunk.length) * size_t(vocab_);
        logits_[s].insert(logits_[s].end(), step_logits_.begin() + std::ptrdiff_t(at),
                          step_logits_.begin() + std::ptrdiff_t(at + count));
        at += count;
        fed_[s] += chunk.length;
      }
      break;
    }
    case Call::Kind::kFinish:
      engine_->finish(ids_[size_t(call.sequence)]);
      running_[size_t(call.sequence)] = false;
      break;
    case Call::Kind::kReset:
      engine_->reset();
      std::fill(running_.begin(), running_.end(), false);
      break;
  }
}

RunResult ScenarioRunner::run(const CallHook& hook) {
  RunResult result = run_calls(hook);
  result.logits = logits_;
  return result;
}

RunResult ScenarioRunner::run_and_take_logits(const CallHook& hook) {
  RunResult result = run_calls(hook);
  result.logits = std::move(logits_);
  logits_.assign(result.logits.size(), {});
  return result;
}

RunResult ScenarioRunner::run_calls(const CallHook& hook) {
  // Reserving every sequence's logits up front keeps the step loop free of
  // reallocation.
  const SchedulePlan plan = plan_schedule(scenario_);
  for (size_t s = 0; s < logits_.size(); ++s) {
    logits_[s].reserve(size_t(plan.fed[s]) * size_t(vocab_));
  }
  RunResult result;
  for (size_t c = 0; c < scenario_.calls.size(); ++c) {
    try {
      execute(scenario_.calls[c]);
    } catch (const EngineError& e) {
      result.engine_failed = true;
      result.failed_call = static_cast<int>(c);
      result.error_kind = e.kind();
      result.error_message = e.what();
      break;
    } catch (const InputError&) {
      throw;  // the engine could not be built or configured: check_property reports it
    } catch (const std::exception& e) {
      result.engine_failed = true;
      result.threw = true;
      result.failed_call = static_cast<int>(c);
      result.error_message = e.what();
      break;
    }
    if (hook && !hook(static_cast<int>(c), *this)) {
      result.stopped = true;
      break;
    }
  }
  return result;
}

RunResult run_scenario(const Scenario& scenario, const Weights& weights,
                       const EngineFactory& factory, const CallHook& hook) {
  ScenarioRunner runner(scenario, scenario.config, weights, factory);
  return runner.run_and_take_logits(hook);
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
