// P7 gqa: a GQA (or MQA) model gives the logits of its MHA twin, whose
// K/V weights repeat each KV head for its query heads (repeat_interleave):
// catches a tiled h % n_kv_heads mapping and KV heads mixed in the cache.
#include <string>
#include <utility>
#include <vector>

#include "properties/common/context.h"
#include "properties/common/logits.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// The MHA twin of a GQA model: KV head g's rows of wk/wv (and bk/bv) copied to
// query heads g*group .. g*group+group-1 (repeat_interleave).
std::pair<Config, Weights> mha_twin(const Config& config, const Weights& weights) {
  Config mha = config;
  mha.n_kv_heads = config.n_heads;
  Weights twin = weights;
  const size_t D = size_t(config.head_dim), E = size_t(config.d_model);
  const int group = config.group();
  const auto repeat = [&](const std::vector<float>& source, size_t row_width) {
    std::vector<float> out;  // [H*D][row_width]
    out.reserve(size_t(config.n_heads) * D * row_width);
    for (int h = 0; h < config.n_heads; ++h) {
      const size_t g = size_t(h / group);
      out.insert(out.end(), source.begin() + std::ptrdiff_t(g * D * row_width),
                 source.begin() + std::ptrdiff_t((g + 1) * D * row_width));
    }
    return out;
  };
  for (LayerWeights& layer : twin.layers) {
    layer.wk = repeat(layer.wk, E);
    layer.wv = repeat(layer.wv, E);
    if (!layer.bk.empty()) layer.bk = repeat(layer.bk, 1);
    if (!layer.bv.empty()) layer.bv = repeat(layer.bv, 1);
  }
  return {mha, std::move(twin)};
}

}  // namespace

Verdict check_gqa(const Context& context) {
  Verdict verdict = start_verdict(Property::kGqa);
  const Config& config = context.scenario.config;
  if (config.n_kv_heads == config.n_heads) {
    return not_applicable(Property::kGqa, "the config is MHA (n_kv_heads == n_heads)");
  }
  const auto [mha_config, mha_weights] = mha_twin(config, context.weights);
  const RunResult gqa = scenario_run(context);
  if (gqa.engine_failed) return engine_refused(Property::kGqa, gqa, "the scenario");
  ScenarioRunner twin_runner(context.scenario, mha_config, mha_weights, context.factory);
  const RunResult mha = twin_runner.run();
  if (mha.engine_failed) return engine_refused(Property::kGqa, mha, "the MHA twin");
  for (size_t s = 0; s < context.scenario.sequences.size(); ++s) {
    if (!same_logits(verdict, context, static_cast<int>(s), mha.logits[s],
                     "the MHA twin (" + std::to_string(config.n_heads) + " KV heads)",
                     gqa.logits[s], "GQA (" + std::to_string(config.n_kv_heads) + " KV heads)",
                     reused_in_either(gqa, mha, s))) {
      return verdict;
    }
  }
  pass(verdict, "GQA equals its MHA twin");
  return verdict;
}

}  // namespace kvcheck::checks
