// Small drivers for the engine's own tests: feed a sequence on a schedule,
// compare with the oracle or bitwise with another run.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "engine/cpu/cpu_engine.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvcheck::test {

struct ModelCase {
  std::string name;
  Config config;
};
inline void PrintTo(const ModelCase& m, std::ostream* out) {
  *out << m.name;
}

// gpt2 and llama, each with MHA, GQA and MQA; 2 layers, small widths.
std::vector<ModelCase> model_cases();

std::vector<int32_t> random_tokens(uint64_t seed, int n, int vocab);

// Splits n into chunk lengths drawn from a seeded generator.
std::vector<int> random_chunks(uint64_t seed, int n);

// Logits of one token: [V].
using Logits = std::vector<float>;

// Feeds `tokens` to `sequence` in the given chunk lengths, one step per chunk,
// and returns the logits of every token, [T][V] flattened.
std::vector<float> feed(Engine& engine, SequenceId sequence, const std::vector<int32_t>& tokens,
                        const std::vector<int>& chunks);

// Fresh engine, one sequence, the whole prompt at once.
std::vector<float> solo_run(const Config& config, const Weights& weights,
                            const EngineOptions& options, const std::vector<int32_t>& tokens);

// Asserts every engine logit [T][V] is within its derived bound
// (properties/tolerance.h, docs/TOLERANCE.md) of the oracle's.
void expect_matches_oracle(const Config& config, const Weights& weights, KvDtype dtype,
                           const std::vector<int32_t>& tokens, const std::vector<float>& logits,
                           const std::string& context);

// Asserts two logit arrays are the same bits; names the first difference.
void expect_bitwise(const std::vector<float>& a, const std::vector<float>& b,
                    const std::string& context);

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);

// Every layer's snapshot bytes of `s`, K then V, and the positions.
std::vector<uint8_t> cache_bytes(const Engine& e, SequenceId s);

}  // namespace kvcheck::test
