// Roofline probes measured inside the same benchmark run as the code they
// judge, so a ratio compares two numbers taken under the same load. The loops
// live in probes.cc behind Highway's dynamic dispatch, like the kernels, so
// they run on the widest vectors this CPU has however the tree was compiled
// (no host-specific -march anywhere).
#pragma once

#include <cstddef>

namespace kvcheck::bench {

// `steps` rounds of independent vector FMA chains (enough to cover FMA
// latency times the FMA pipes); returns the f32 flops done.
double fma_chains(size_t steps);

// Sum of n floats with four vector accumulators, so the loop is bound by the
// loads; `data` needs no particular alignment.
float sum_floats(const float* data, size_t n);

// The Highway target the probes dispatch to on this CPU (e.g. "AVX3").
const char* probe_target_name();

// Best of `trials` sums of a 256 MiB array (far above the LLC): the DRAM
// streaming-read bandwidth of one thread, GB/s.
double stream_read_gbps(int trials = 5);

// Best of `trials` runs of fma_chains: the single-thread f32 FMA peak, GFLOP/s.
double fma_peak_gflops(int trials = 5);

// This thread's CPU time in seconds: comparisons taking turns on a loaded
// machine see only their own work, not the time other processes ran.
double thread_cpu_seconds();

}  // namespace kvcheck::bench
