// P10: two engines on the same scenario agree within a derived bound. Written
// here (tests/gpu) for the lead to promote into properties/; it uses only
// the properties library's public API.
//
// Derivation: the tolerance module bounds, per logit, |engine - exact| by
// B (properties/tolerance.h) for any engine whose kernels meet the per-kernel
// error bounds of docs/KERNELS.md, whatever their reduction order. The CPU
// engine meets them; so does the CUDA engine (docs/CUDA.md, "Accuracy":
// every dot product / sum is some order of the same terms, exp and tanh are
// within 2 ulp, and its split softmax adds one exp and one product per key,
// covered by the same first-order terms). By the triangle inequality
// |a - b| <= |a - exact| + |exact - b| <= 2 B. A NaN or infinity on either
// side fails. Sequences are compared over the positions both runs fed.
#pragma once

#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck {

// Runs `scenario` on a fresh engine from each factory; passes when every fed
// token's logits agree within 2 B. Verdict::worst_ratio is the largest
// |a - b| / (2 B); Verdict::property is kOracle (P10 has no enum value yet).
Verdict check_cross_engine(const Scenario& scenario, const EngineFactory& engine,
                           const EngineFactory& reference);

}  // namespace kvcheck
