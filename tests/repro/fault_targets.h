// For each fault of the catalogue: the property its shrink target in
// docs/FAULTS.md is stated for, and that target size. The shrink tests, the
// bloated-case maker and docs/CASE_FORMAT.md's shrink table use this list.
#pragma once

#include <vector>

#include "engine/faults.h"
#include "properties/property.h"

namespace kvcheck::test {

struct FaultTarget {
  Fault fault;
  Property property;
  int shrink_target;  // docs/FAULTS.md, last column
};

inline const std::vector<FaultTarget>& fault_targets() {
  using P = Property;
  static const std::vector<FaultTarget> targets = {
      {Fault::kSharedLayerCache, P::kCacheState, 6},
      {Fault::kSharedRows, P::kCacheState, 7},
      {Fault::kDecodePositionZero, P::kChunking, 6},
      {Fault::kChunkPositionRestart, P::kChunking, 7},
      {Fault::kPositionLagAfterFirst, P::kChunking, 6},
      {Fault::kPositionBumpPerLayer, P::kCacheState, 6},
      {Fault::kTiledKvHeads, P::kGqa, 8},
      {Fault::kResetKeepsKv, P::kReset, 9},
      {Fault::kResetKeepsPosition, P::kCacheState, 9},
      {Fault::kMaskTopLeft, P::kChunking, 6},
      {Fault::kAppendOverwrites, P::kChunking, 6},
      {Fault::kCompactionTableOnly, P::kCacheState, 8},
      {Fault::kRopeReapplied, P::kChunking, 7},
      {Fault::kKvSwapped, P::kCacheState, 5},
      {Fault::kCapacityWraps, P::kCapacity, 5},
  };
  return targets;
}

}  // namespace kvcheck::test
