// The oracle: a deliberately naive model that recomputes the whole prefix in
// double precision. Plain loops, one function per op, readable as the
// specification of what the engine must compute. It shares the model's
// definition (config, weights) with the engine and nothing else.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck::oracle {

struct Output {
  int n_tokens = 0;            // T
  std::vector<double> logits;  // [T][V]
  std::vector<double> k;       // [L][T][KVH][D], after RoPE (llama), as a cache holds it
  std::vector<double> v;       // [L][T][KVH][D]

  double logit(int t, int vocab_index, int vocab) const {
    return logits[static_cast<size_t>(t) * vocab + vocab_index];
  }
};

// Runs tokens at absolute positions 0..T-1. Tokens must be in [0, vocab) and
// T <= max_pos; violations throw InputError.
Output forward(const Config& config, const Weights& weights, std::span<const int32_t> tokens);

}  // namespace kvcheck::oracle
