// Named arithmetics (ArithmeticTraits) that real engines run, so that one
// word can declare them: the backend option `arithmetic=NAME` (which lets
// the in-tree f32 engine be checked under a wider bound, to show that the
// bound still kills every fault), the tolerance's tests and its margin
// tool. Each row says which engine computes that way and is derived in
// docs/TOLERANCE.md, "Reduced-precision arithmetic"; the llama.cpp adapter
// declares the same fields in its traits (adapters/llama.cpp/traits.mjs).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/traits.h"

namespace kvcheck {

struct ArithmeticPreset {
  const char* name;
  const char* engine;  // who computes this way
  ArithmeticTraits arithmetic;
};

// Every preset, "f32" first.
const std::vector<ArithmeticPreset>& arithmetic_presets();
// The preset of that name, or none.
std::optional<ArithmeticTraits> find_arithmetic_preset(std::string_view name);
// "f32, ggml-f32, ..." for messages.
std::string arithmetic_preset_names();

}  // namespace kvcheck
