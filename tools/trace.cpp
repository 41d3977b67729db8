#include "tools/trace.h"

#include "model/weights.h"

namespace kvcheck::cli {

namespace {

// The chunk of `sequence` that call `call` fed, or 0.
int fed_by_call(const Call& call, int sequence) {
  if (call.kind != Call::Kind::kStep) return 0;
  for (const ChunkSpec& chunk : call.chunks) {
    if (chunk.sequence == sequence) return chunk.length;
  }
  return 0;
}

std::string written_text(int fed_after, int chunk) {
  if (chunk == 0) return "wrote nothing";
  const int first = fed_after - chunk, last = fed_after - 1;
  return "wrote position" + (first == last
                                 ? " " + std::to_string(first)
                                 : "s " + std::to_string(first) + ".." + std::to_string(last));
}

// The shape of one sequence's cache, "[1, KVH, len, D]", and what the engine
// says when its length is not what the scenario fed.
std::string shape_text(const Engine& engine, SequenceId id, int fed) {
  const Config& c = engine.config();
  int length = 0;
  try {
    length = engine.length(id);
  } catch (const EngineError& e) {
    return std::string("length() refused: ") + e.what();
  }
  std::string text = "[1, " + std::to_string(c.n_kv_heads) + ", " + std::to_string(length) + ", " +
                     std::to_string(c.head_dim) + "]";
  if (length != fed) text += " (the scenario fed " + std::to_string(fed) + ")";
  return text;
}

}  // namespace

std::vector<std::string> cache_shape_lines(const Scenario& scenario, int call_index,
                                           const ScenarioRunner& runner) {
  const Call& call = scenario.calls[size_t(call_index)];
  const Engine& engine = runner.engine();
  std::vector<std::string> lines;
  if (call.kind == Call::Kind::kReset) lines.push_back("  reset: every sequence dropped");
  for (int s = 0; s < static_cast<int>(scenario.sequences.size()); ++s) {
    const std::string name = "  s" + std::to_string(s);
    if (call.kind == Call::Kind::kFinish && call.sequence == s) {
      lines.push_back(name + ": finished, its cache freed");
    }
    if (!runner.running(s)) continue;
    const std::string shape = shape_text(engine, runner.id(s), runner.fed(s));
    const std::string written = written_text(runner.fed(s), fed_by_call(call, s));
    for (int layer = 0; layer < engine.config().n_layers; ++layer) {
      lines.push_back(name + " layer " + std::to_string(layer) + ": " + shape + " " + written);
    }
  }
  if (lines.empty()) lines.push_back("  no sequence cached");
  return lines;
}

std::vector<std::string> cache_trace(const Scenario& scenario, const EngineFactory& factory,
                                     const std::function<std::string(const Call&)>& call_label) {
  const std::shared_ptr<const Weights> model_weights = scenario_weights(scenario);
  const Weights& weights = *model_weights;
  std::vector<std::string> trace;
  if (scenario.calls.empty()) trace.push_back("the scenario makes no calls");
  const CallHook hook = [&](int call_index, const ScenarioRunner& runner) {
    trace.push_back("after call " + std::to_string(call_index) + " (" +
                    call_label(scenario.calls[size_t(call_index)]) + "):");
    for (std::string& line : cache_shape_lines(scenario, call_index, runner)) {
      trace.push_back(std::move(line));
    }
    return true;
  };
  const RunResult run = run_scenario(scenario, weights, factory, hook);
  if (run.engine_failed) {
    trace.push_back("call " + std::to_string(run.failed_call) + " (" +
                    call_label(scenario.calls[size_t(run.failed_call)]) +
                    ") refused by the engine: " + run.error_message);
  }
  return trace;
}

}  // namespace kvcheck::cli
