// How P6 reads a cache snapshot against the oracle's K/V: one element's
// error and bound (with q8_0's block scales), which slot holds a position,
// whether the slots cover what a layer must hold, and the per-layer table a
// failure prints. Apart from P6's walk over the calls so that each stays
// short enough to read.
#pragma once

#include <cmath>
#include <string>

#include "engine/engine.h"
#include "properties/common/reference.h"

namespace kvcheck::checks {

// P6's comparison of one cached element (docs/TOLERANCE.md). base indexes
// element 0 of (layer, position, kv head) in the reference's [L][T][KVH][D]
// arrays. For q8_0 with the engine's scales, the bound is the computed part
// plus half a code of the stored scale, and that scale must itself be the
// block's amax / 127 within q8_scale_bound: a wrong scale makes every element
// of its block wrong, with the scale's error/bound as the ratio when larger.
struct ElementCheck {
  double cached = 0, exact = 0, bound = 0, ratio = 0;
  double scale = NAN, scale_exact = NAN;  // q8_0 only: stored and exact amax / 127
};
ElementCheck check_element(const CacheSnapshot& snap, const SequenceReference& reference, int kind,
                           size_t base, int pos, int g, int d);

// The snapshot index holding absolute position `pos`, or -1 when the
// snapshot does not hold it (a windowed layer's ring keeps the last W).
int snapshot_index(const CacheSnapshot& snap, int pos);

// Why a snapshot's slots are not what a layer must hold after `held` tokens,
// or "": slot i holds position i for all of them (no positions listed), or
// the listed positions ascend one by one and end at held - 1, covering at
// least the window (the last min(held, W) positions) of a windowed layer.
std::string snapshot_coverage_error(const CacheSnapshot& snap, const Config& config, int layer,
                                    int held);

// Per layer, the largest |cached - oracle| of K and V over position ranges,
// with its error/bound; "!" marks a range holding a wrong or non-finite slot.
std::string cache_table(const Engine& engine, SequenceId id, const SequenceReference& reference,
                        const Config& config, int length);

}  // namespace kvcheck::checks
