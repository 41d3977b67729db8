// The small inline SVG pictures of the HTML report (tools/report_html.h).
// No xmlns attribute: HTML5 puts inline <svg> in the SVG namespace itself,
// and the report then holds no URL at all.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tools/run_report.h"

namespace kvcheck::cli {

// Bars of an error/bound histogram ([bucket] counts); the ">=1" bucket red.
std::string ratio_histogram_svg(const std::array<int, kRatioBuckets>& counts);

// Horizontal bars: one row per label, value in 0..1 printed as a percentage.
std::string percent_bars_svg(const std::vector<std::pair<std::string, double>>& rows);

// One heat-map cell of the kill matrix.
struct HeatCell {
  std::string text;     // printed in the cell
  std::string tooltip;  // <title>
  std::string colour;   // CSS colour
};

// Rows x columns of cells with row and column labels ([row][column]).
std::string heat_map_svg(const std::vector<std::string>& row_labels,
                         const std::vector<std::string>& column_labels,
                         const std::vector<std::vector<HeatCell>>& cells, int cell_width = 230);

// An error/bound map: white-to-blue below the bound (log scale from 1e-6),
// red at or over it; rows past kMaxRows are left out (the caller says so).
inline constexpr int kErrorMapMaxRows = 64;
std::string error_map_svg(const ErrorMap& map);

// Colour for "cases until the kill" on a log scale from 1 (green, fast) to
// `max_cases` (red, barely killed).
std::string kill_colour(int cases, int max_cases);

}  // namespace kvcheck::cli
