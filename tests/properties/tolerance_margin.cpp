// Measures the margin of the P1/P6 tolerance (docs/TOLERANCE.md): the largest
// error/bound of the correct engine over many random small scenarios, the
// smallest error/bound among the faulty runs P1 fails, how often P1 misses a
// fault that changed the logits, and the time each property takes per case.
//
//   tolerance_margin [cases] [seed] [--faults] [--timing] [--shift]
//
// --shift: llama scenarios on contiguous storage with context shifts (erase
// a range, shift the rest by -n) after random steps, checked against the
// replay's history bounds (docs/TOLERANCE.md, "Re-rotating a stored key").
//
// Portable randomness only (SplitMix64); the seed is printed, so a run is
// reproducible on any machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/in_tree.h"
#include "model/rng.h"
#include "properties/runner.h"

namespace kvcheck {
namespace {

int pick(SplitMix64& rng, int lo, int hi) {
  return static_cast<int>(rng.in_range(lo, hi));
}

constexpr int kDtypes = 4;  // f32, bf16, f16, q8_0: the KvDtype order

// A random valid scenario at "small" sizes: what a campaign case looks like.
Scenario random_scenario(SplitMix64& rng, bool shifts) {
  Scenario s;
  Config& c = s.config;
  c.family = rng.below(2) || shifts ? Family::kLlama : Family::kGpt2;
  c.n_layers = pick(rng, 1, 4);
  c.n_kv_heads = pick(rng, 1, 4);
  c.n_heads = c.n_kv_heads * pick(rng, 1, 4);
  c.head_dim = 2 * pick(rng, 1, 8);
  c.d_model = 4 * pick(rng, 1, 16);
  c.d_ff = 4 * pick(rng, 1, 32);
  c.vocab = pick(rng, 8, 128);
  c.norm_eps = c.family == Family::kGpt2 ? 1e-5 : 1e-6;
  c.qkv_bias = c.family == Family::kGpt2 && rng.below(2) == 1;
  s.weight_seed = rng.next();
  const int n_sequences = pick(rng, 1, 4);
  s.capacity = pick(rng, 4, 48);
  c.max_pos = s.capacity + pick(rng, 0, 8);
  s.max_rows = pick(rng, 1, 4);
  const KvDtype dtypes[kDtypes] = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0};
  s.kv_dtype = dtypes[pick(rng, 0, kDtypes - 1)];
  // q8_0 heads wider than 32 hold a whole scale block and a partial one.
  if (s.kv_dtype == KvDtype::kQ8_0 && rng.below(2) == 1) c.head_dim += int(kQ8Block);
  for (int i = 0; i < n_sequences; ++i) {
    std::vector<int32_t>& tokens = s.sequences.emplace_back();
    const int n = pick(rng, 1, s.capacity);
    for (int t = 0; t < n; ++t)
      tokens.push_back(static_cast<int32_t>(rng.below(uint64_t(c.vocab))));
  }
  // Walk a schedule: start when a row is free, feed random chunks of random
  // subsets, finish a sequence that is done, reset now and then.
  std::vector<int> fed(size_t(n_sequences), 0);
  std::vector<int> held(size_t(n_sequences), 0);   // cells (positions stay 0..held-1)
  std::vector<int> state(size_t(n_sequences), 0);  // 0 waiting, 1 running, 2 done
  int next = 0, running = 0;
  for (int guard = 0; guard < 200; ++guard) {
    if (next < n_sequences && running < s.max_rows && (running == 0 || rng.below(3) == 0)) {
      s.calls.push_back(Call::start(next));
      state[size_t(next++)] = 1;
      ++running;
      continue;
    }
    if (running == 0) break;
    if (rng.below(12) == 0) {
      s.calls.push_back(Call::reset());
      for (int& st : state) st = st == 1 ? 2 : st;
      running = 0;
      continue;
    }
    std::vector<ChunkSpec> chunks;
    for (int i = 0; i < n_sequences; ++i) {
      const int left = static_cast<int>(s.sequences[size_t(i)].size()) - fed[size_t(i)];
      if (state[size_t(i)] != 1 || left == 0 || (!chunks.empty() && rng.below(2) == 0)) continue;
      const int n = rng.below(2) ? 1 : pick(rng, 1, left);
      chunks.push_back({i, n});
      fed[size_t(i)] += n;
      held[size_t(i)] += n;
    }
    std::reverse(chunks.begin(), chunks.end());
    if (!chunks.empty()) s.calls.push_back(Call::step(chunks));
    for (int i = 0; shifts && i < n_sequences; ++i) {
      // A context shift: erase n cells at keep, move the rest down by n.
      const int h = held[size_t(i)];
      if (state[size_t(i)] != 1 || h < 2 || rng.below(3) != 0) continue;
      const int n = pick(rng, 1, h - 1), keep = pick(rng, 0, h - n);
      s.calls.push_back(Call::erase(i, keep, keep + n));
      if (keep + n < h) s.calls.push_back(Call::shift(i, keep + n, c.max_pos, -n));
      held[size_t(i)] -= n;
    }
    for (int i = 0; i < n_sequences; ++i) {
      const bool done = fed[size_t(i)] == static_cast<int>(s.sequences[size_t(i)].size());
      if (state[size_t(i)] == 1 && (done || rng.below(10) == 0) && rng.below(2) == 0) {
        s.calls.push_back(Call::finish(i));
        state[size_t(i)] = 2;
        --running;
      }
    }
    if (chunks.empty() && running > 0) {
      for (int i = 0; i < n_sequences; ++i) {
        if (state[size_t(i)] == 1) {
          s.calls.push_back(Call::finish(i));
          state[size_t(i)] = 2;
          --running;
        }
      }
    }
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace
}  // namespace kvcheck

int main(int argc, char** argv) {
  using namespace kvcheck;
  const long cases = argc > 1 ? std::atol(argv[1]) : 10000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 20240601;
  bool faults = false, timing = false, shifts = false;
  for (int i = 3; i < argc; ++i) {
    faults |= std::strcmp(argv[i], "--faults") == 0;
    timing |= std::strcmp(argv[i], "--timing") == 0;
    shifts |= std::strcmp(argv[i], "--shift") == 0;
  }
  std::printf("tolerance_margin: %ld cases, seed %llu\n", cases,
              static_cast<unsigned long long>(seed));
  SplitMix64 rng(seed);
  const EngineFactory paths[2] = {cpu_engine_factory({}, KernelPath::kReference),
                                  cpu_engine_factory({}, KernelPath::kOptimized)};
  // With the CPU engine's own traits: they declare q8_0 (the strict default does not).
  // --shift: with the operations declared (erase, shift).
  const EngineUnderTest subjects[2] = {
      EngineUnderTest(paths[0], shifts ? cpu_engine_traits_with_operations(KernelPath::kReference)
                                       : cpu_engine_traits(KernelPath::kReference)),
      EngineUnderTest(paths[1], shifts ? cpu_engine_traits_with_operations(KernelPath::kOptimized)
                                       : cpu_engine_traits(KernelPath::kOptimized))};
  double worst[2][kDtypes] = {};     // [P1, P6][dtype]
  long applicable[2][kDtypes] = {};  // [P1, P6][dtype] cases the property applied to
  long logits_compared = 0, invalid = 0, failures = 0;
  std::string worst_case;
  double fault_min_caught[kFaultCount];
  long fault_caught[kFaultCount] = {}, fault_missed_changed[kFaultCount] = {};
  long fault_refused[kFaultCount] = {};
  std::fill(std::begin(fault_min_caught), std::end(fault_min_caught), INFINITY);
  double property_seconds[kPropertyCount] = {};
  long property_runs[kPropertyCount] = {};
  for (long n = 0; n < cases; ++n) {
    const Scenario s = random_scenario(rng, shifts);
    if (!s.validate().empty()) {
      ++invalid;
      continue;
    }
    const EngineUnderTest& subject = subjects[n % 2];
    const int dtype = static_cast<int>(s.kv_dtype);
    for (Property p : {Property::kOracle, Property::kCacheState}) {
      const Verdict v = check_property(p, s, subject);
      applicable[p == Property::kOracle ? 0 : 1][dtype] += v.applicable;
      if (!v.passed) {
        ++failures;
        std::printf("CORRECT ENGINE FAILED case %ld:\n%s\n%s\n%s\n", n, s.to_text().c_str(),
                    v.summary.c_str(), v.detail.c_str());
      }
      double& w = worst[p == Property::kOracle ? 0 : 1][dtype];
      if (v.worst_ratio > w) {
        w = v.worst_ratio;
        if (p == Property::kOracle && dtype == 0) worst_case = s.to_text();
      }
    }
    for (const auto& seq : plan_schedule(s).fed) logits_compared += long(seq) * s.config.vocab;
    if (timing) {
      for (int p = 0; p < kPropertyCount; ++p) {
        const auto start = std::chrono::steady_clock::now();
        const Verdict v = check_property(static_cast<Property>(p), s, subjects[1]);
        property_seconds[p] += seconds_since(start);
        property_runs[p] += 1;
        if (!v.passed) {
          ++failures;
          std::printf("CORRECT ENGINE FAILED %s case %ld:\n%s\n%s\n",
                      std::string(property_label(static_cast<Property>(p))).c_str(), n,
                      s.to_text().c_str(), v.detail.c_str());
        }
      }
    }
    if (faults) {
      const RunResult correct = run_scenario(s, init_weights(s.config, s.weight_seed), paths[1]);
      for (int f = 0; f < kFaultCount; ++f) {
        const FaultSet set(static_cast<Fault>(f));
        const Verdict v = check_property(
            Property::kOracle, s,
            EngineUnderTest(cpu_engine_factory(set, KernelPath::kOptimized),
                            shifts ? cpu_engine_traits_with_operations() : cpu_engine_traits()));
        if (!v.passed) {
          ++fault_caught[f];
          // A refusal of a valid call fails P1 without a ratio.
          if (v.worst_ratio > 0) {
            fault_min_caught[f] = std::min(fault_min_caught[f], v.worst_ratio);
          } else {
            ++fault_refused[f];
          }
          continue;
        }
        const RunResult faulty = run_scenario(s, init_weights(s.config, s.weight_seed),
                                              cpu_engine_factory(set, KernelPath::kOptimized));
        bool changed = faulty.engine_failed != correct.engine_failed;
        for (size_t q = 0; q < s.sequences.size() && !changed; ++q) {
          changed = first_bit_difference(correct.logits[q], faulty.logits[q]).has_value();
        }
        fault_missed_changed[f] += changed;
      }
    }
  }
  std::printf("largest error/bound of the correct engine (%ld logits compared):\n",
              logits_compared);
  for (int d = 0; d < kDtypes; ++d) {
    const char* name = kv_dtype_name(static_cast<KvDtype>(d));
    std::printf("  %-5s P1 %.4f   P6 %.4f   (applicable in %ld / %ld cases)\n", name, worst[0][d],
                worst[1][d], applicable[0][d], applicable[1][d]);
  }
  std::printf("worst f32 P1 case:\n%s", worst_case.c_str());
  if (faults) {
    std::printf(
        "P1 on faulty engines: caught (of them refusals), smallest error/bound among "
        "the caught by ratio, missed although the logits changed\n");
    for (int f = 0; f < kFaultCount; ++f) {
      std::printf("  %-26s %6ld (%4ld)  %10.3g  %6ld\n",
                  std::string(fault_name(static_cast<Fault>(f))).c_str(), fault_caught[f],
                  fault_refused[f], fault_min_caught[f], fault_missed_changed[f]);
    }
  }
  if (timing) {
    std::printf("time per case (optimized path):\n");
    for (int p = 0; p < kPropertyCount; ++p) {
      std::printf("  %s %-12s %8.3f ms\n",
                  std::string(property_label(static_cast<Property>(p))).c_str(),
                  std::string(property_name(static_cast<Property>(p))).c_str(),
                  1e3 * property_seconds[p] / std::max(1L, property_runs[p]));
    }
  }
  std::printf("invalid generated scenarios skipped: %ld; correct-engine failures: %ld\n", invalid,
              failures);
  return failures == 0 ? 0 : 1;
}
