// AdapterCheck::shapes_session (tools/adapter_check.h): the model shapes a
// generator draws beyond the two tiny models (MHA, GQA, MQA, n_heads *
// head_dim != d_model, d_ff != 4 * d_model, in each family), each one the
// traits allow loaded and stepped once. A shape the engine cannot load or
// step is named with the limit that would exclude it: a campaign draws
// every shape the traits allow, so the traits must say what the engine
// cannot take (a lesson's GPT asserts d_out % num_heads == 0 and has no GQA).
#include <algorithm>
#include <cstdio>
#include <functional>

#include "tools/adapter_check.h"

namespace kvcheck::cli {

namespace {

std::string describe(const Config& c) {
  return std::to_string(c.n_heads) + " heads of " + std::to_string(c.head_dim) + " over " +
         std::to_string(c.n_kv_heads) + " KV head" + (c.n_kv_heads == 1 ? "" : "s") + ", d_model " +
         std::to_string(c.d_model) + ", d_ff " + std::to_string(c.d_ff);
}

}  // namespace

void AdapterCheck::shapes_session(const EngineTraits& traits, const std::vector<Config>& checked) {
  std::vector<Shape> shapes;
  for (const Family family : {Family::kGpt2, Family::kLlama}) {
    Config mha = family == Family::kGpt2 ? gpt2_tiny() : llama_tiny();
    mha.n_kv_heads = mha.n_heads;
    const auto add = [&](const std::string& what, const std::function<void(Config&)>& change) {
      Config c = mha;
      change(c);
      const int m = traits.limits.head_dim_multiple;
      if (m > 1) c.head_dim = (c.head_dim + m - 1) / m * m;
      shapes.push_back(
          {std::string(family_name(family)) + " " + what + " (" + describe(c) + ")", c});
    };
    add("MHA", [](Config&) {});
    add("GQA", [](Config& c) { c.n_kv_heads = c.n_heads / 2; });
    add("MQA", [](Config& c) { c.n_kv_heads = 1; });
    add("n_heads x head_dim != d_model", [](Config& c) { c.head_dim = 6; });
    // llama's SwiGLU width is free; gpt2's Linear(E, 4E) is the one a lesson fixes.
    if (family == Family::kGpt2) add("d_ff != 4 x d_model", [](Config& c) { c.d_ff = 48; });
  }
  std::vector<Config> seen = checked;
  for (const Shape& shape : shapes) {
    if (std::find(seen.begin(), seen.end(), shape.config) != seen.end()) continue;
    seen.push_back(shape.config);
    const Family family = shape.config.family;
    if (!accepts_family(traits.limits, family)) {
      // One line for a family the traits exclude, not one per shape.
      if (shape.what.find(" MHA ") != std::string::npos)
        std::printf("  skip %s shapes: the traits exclude the family (%s positions)\n",
                    family_name(family), positions_name(family));
      continue;
    }
    const std::string excluded =
        traits.refuses(shape.config, KvDtype::kF32, kAdapterCapacity, kAdapterMaxRows);
    if (!excluded.empty()) {
      std::printf("  skip %s: the traits exclude it (%s)\n", shape.what.c_str(), excluded.c_str());
      continue;
    }
    const int bugs = bugs_;
    shape_check(shape);
    // Wrong answers on a shape the engine was never meant to take (weights
    // it read without checking their shape) look like a cache bug.
    if (bugs_ > bugs)
      std::printf("  note: the traits allow %s; if the engine cannot take it, declare %s\n",
                  shape.what.c_str(), limit_for(shape.config).c_str());
  }
}

// Load, create, start and one step of 3 tokens against the oracle; a
// refusal of the load, the create or the step is the shape's.
void AdapterCheck::shape_check(const Shape& shape) {
  const Config& c = shape.config;
  const Weights weights = init_weights(c, kAdapterWeightSeed);
  const std::string& what = shape.what;
  const auto model =
      make(what + ": load", {{"op", "load"}, {"path", folders_.folder(c, weights).path}}, "model",
           &shape);
  if (!model) return;
  const auto engine = create(what + ": create", *model, &shape);
  const auto sequence = engine ? start(what + ": start", *engine) : std::nullopt;
  if (sequence) {
    const std::vector<int32_t> tokens = {1 % c.vocab, 5 % c.vocab, 9 % c.vocab};
    const size_t bytes = 3 * size_t(c.vocab) * 4;
    const std::string step = what + ": step (3 tokens)";
    const wire::Reply r = call(step,
                               {{"op", "step"},
                                {"engine", *engine},
                                {"entries", {{{"sequence", *sequence}, {"tokens", tokens}}}}},
                               {4, 4 * bytes + 4096});
    std::vector<float> logits;
    if (r.error)
      refused_shape(shape, "step refused: " + r.error->kind + ": " + wire::error_text(*r.error));
    else if (logits_of(step, r, 3, c.vocab, logits))
      compare_logits(step, c, weights, tokens, 0, logits.data());
  }
  if (engine) call_ok(what + ": destroy", {{"op", "destroy"}, {"engine", *engine}});
  call_ok(what + ": unload", {{"op", "unload"}, {"model", *model}});
}

}  // namespace kvcheck::cli
