// The cache timeline's pictures (tools/cache_timeline.h): one small SVG per
// frame, storage units as rows and slots as columns, and the legend that
// explains the colours once.
#pragma once

#include <string>

#include "tools/cache_timeline.h"

namespace kvcheck::cli {

// Slots past kMaxTimelineSlots and units past kMaxTimelineUnits are left
// out; the frame's caption says so.
inline constexpr int kMaxTimelineSlots = 96;
inline constexpr int kMaxTimelineUnits = 16;

std::string timeline_frame_svg(const TimelineFrame& frame);
std::string timeline_legend_svg();

}  // namespace kvcheck::cli
