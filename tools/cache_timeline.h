// The cache timeline of a failing case for the HTML report: the case re-run
// on its engine, and after every call a picture of the storage (which
// sequences hold each row, which slots hold data, which hold the poison of an
// unwritten slot, and which slots the call changed). It needs the engine's
// storage map (operations.storage_map); for an engine without one the
// timeline says so instead.
#pragma once

#include <string>
#include <vector>

#include "engine/storage_map.h"
#include "properties/property.h"
#include "properties/scenario.h"

namespace kvcheck::cli {

struct TimelineFrame {
  std::string label;                      // "after call 2: step s0:3 s1:1"
  StorageMap map;                         // holders are engine ids
  std::vector<std::vector<int>> holders;  // [unit] scenario sequence indices holding it
  std::vector<uint8_t> wrote;             // [unit][slot] 1: the call changed the slot
};

struct CacheTimeline {
  std::string unavailable;            // why there is no timeline; empty when frames hold one
  std::vector<TimelineFrame> frames;  // frames[0] is the fresh engine, then one per call
  bool truncated = false;             // calls past kMaxTimelineFrames were left out
};

inline constexpr int kMaxTimelineFrames = 40;

// Re-runs the scenario on a fresh engine of `subject` and records a frame
// before the first call and after each call that succeeded. A refused call
// ends the timeline with a frame labelled by its error.
CacheTimeline cache_timeline(const Scenario& scenario, const EngineUnderTest& subject);

}  // namespace kvcheck::cli
