#include "tools/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>

namespace kvcheck::cli {

namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", v);
  return text;
}

}  // namespace

std::string ratio_histogram_svg(const std::array<int, kRatioBuckets>& counts) {
  constexpr int kBar = 9, kHeight = 30, kAxis = 11;
  const int most = std::max(1, *std::max_element(counts.begin(), counts.end()));
  std::ostringstream out;
  out << "<svg class=\"hist\" width=\"" << kBar * kRatioBuckets << "\" height=\"" << kHeight + kAxis
      << "\" role=\"img\">";
  for (int b = 0; b < kRatioBuckets; ++b) {
    const double h =
        counts[size_t(b)] ? std::max(1.5, kHeight * counts[size_t(b)] / double(most)) : 0;
    out << "<rect x=\"" << b * kBar + 1 << "\" y=\"" << number(kHeight - h) << "\" width=\""
        << kBar - 2 << "\" height=\"" << number(h) << "\" fill=\""
        << (b == kRatioBuckets - 1 ? "#c62828" : "#1565c0") << "\"><title>error/bound "
        << escape_xml(ratio_bucket_label(b)) << (b == 0 || b == kRatioBuckets - 1 ? "" : " ..")
        << ": " << counts[size_t(b)] << " cases</title></rect>";
  }
  out << "<line x1=\"0\" x2=\"" << kBar * kRatioBuckets << "\" y1=\"" << kHeight + 0.5 << "\" y2=\""
      << kHeight + 0.5 << "\" stroke=\"#888\"/>";
  // Axis marks at 1e-6, at 0.1 (decades to its left, tenths to its right)
  // and at 1 (the bound).
  for (const auto& [bucket, label] : {std::pair{1, "1e-6"}, std::pair{kRatioFirstTenth, "0.1"},
                                      std::pair{kRatioBuckets - 1, "1"}}) {
    out << "<text x=\"" << kBar * bucket << "\" y=\"" << kHeight + kAxis - 1
        << "\" class=\"axis\" text-anchor=\"middle\">" << label << "</text>";
  }
  out << "</svg>";
  return out.str();
}

std::string percent_bars_svg(const std::vector<std::pair<std::string, double>>& rows) {
  constexpr int kBar = 160, kRow = 16;
  // Room for the longest label at about 6 px a character (11 px text), so
  // that "abort, then a hit on its prefix" is not cut at the left edge.
  size_t longest = 0;
  for (const auto& row : rows) longest = std::max(longest, row.first.size());
  const int kLabel = std::max(110, int(longest) * 6 + 10);
  std::ostringstream out;
  out << "<svg class=\"bars\" width=\"" << kLabel + kBar + 45 << "\" height=\""
      << kRow * rows.size() + 2 << "\" role=\"img\">";
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& [label, value] = rows[i];
    const double y = double(kRow * i);
    out << "<text x=\"" << kLabel - 6 << "\" y=\"" << y + 12 << "\" text-anchor=\"end\">"
        << escape_xml(label) << "</text><rect x=\"" << kLabel << "\" y=\"" << y + 3 << "\" width=\""
        << kBar << "\" height=\"10\" fill=\"#eceff1\"/><rect x=\"" << kLabel << "\" y=\"" << y + 3
        << "\" width=\"" << number(kBar * std::clamp(value, 0.0, 1.0))
        << "\" height=\"10\" fill=\"#00897b\"/><text x=\"" << kLabel + kBar + 4 << "\" y=\""
        << y + 12 << "\">" << int(std::lround(100 * value)) << "%</text>";
  }
  out << "</svg>";
  return out.str();
}

std::string heat_map_svg(const std::vector<std::string>& row_labels,
                         const std::vector<std::string>& column_labels,
                         const std::vector<std::vector<HeatCell>>& cells, int cell_width) {
  constexpr int kLabel = 180, kRow = 20, kHead = 20;
  const int kCell = cell_width;
  std::ostringstream out;
  out << "<svg class=\"heat\" width=\"" << kLabel + kCell * column_labels.size() + 2
      << "\" height=\"" << kHead + kRow * row_labels.size() + 2 << "\" role=\"img\">";
  for (size_t c = 0; c < column_labels.size(); ++c) {
    out << "<text x=\"" << kLabel + kCell * c + kCell / 2 << "\" y=\"14\" text-anchor=\"middle\" "
        << "font-weight=\"bold\">" << escape_xml(column_labels[c]) << "</text>";
  }
  for (size_t r = 0; r < row_labels.size(); ++r) {
    const size_t y = kHead + kRow * r;
    out << "<text x=\"" << kLabel - 6 << "\" y=\"" << y + 14 << "\" text-anchor=\"end\">"
        << escape_xml(row_labels[r]) << "</text>";
    for (size_t c = 0; c < cells[r].size(); ++c) {
      const HeatCell& cell = cells[r][c];
      const size_t x = kLabel + kCell * c;
      out << "<g><title>" << escape_xml(cell.tooltip) << "</title><rect x=\"" << x << "\" y=\"" << y
          << "\" width=\"" << kCell - 2 << "\" height=\"" << kRow - 2 << "\" fill=\"" << cell.colour
          << "\"/><text x=\"" << x + kCell / 2 << "\" y=\"" << y + 13
          << "\" text-anchor=\"middle\" class=\"cell\">" << escape_xml(cell.text) << "</text></g>";
    }
  }
  out << "</svg>";
  return out.str();
}

namespace {

std::string ratio_colour(double ratio) {
  if (!(ratio < 1)) return "#d32f2f";
  const double t = ratio < 1e-6 ? 0 : (std::log10(ratio) + 6) / 6;  // 1e-6 -> 0, 1 -> 1
  char text[40];
  std::snprintf(text, sizeof(text), "hsl(210,70%%,%d%%)", int(std::lround(96 - 56 * t)));
  return text;
}

}  // namespace

std::string error_map_svg(const ErrorMap& map) {
  constexpr int kLabel = 76, kCell = 22, kRow = 14, kHead = 46;
  const size_t rows = std::min(map.ratio.size(), size_t(kErrorMapMaxRows));
  const size_t cols = map.col_labels.size();
  std::ostringstream out;
  out << "<svg class=\"emap\" width=\"" << kLabel + kCell * cols + 4 << "\" height=\""
      << kHead + kRow * rows + 4 << "\" role=\"img\">";
  for (size_t c = 0; c < cols; ++c) {
    const size_t x = kLabel + kCell * c + kCell / 2;
    out << "<text class=\"axis\" transform=\"translate(" << x << "," << kHead - 4
        << ") rotate(-60)\">" << escape_xml(map.col_labels[c]) << "</text>";
  }
  for (size_t r = 0; r < rows; ++r) {
    const size_t y = kHead + kRow * r;
    out << "<text class=\"axis\" x=\"" << kLabel - 4 << "\" y=\"" << y + 10
        << "\" text-anchor=\"end\">" << escape_xml(map.row_labels[r]) << "</text>";
    for (size_t c = 0; c < cols; ++c) {
      const double ratio = map.ratio[r][c];
      char value[32];
      std::snprintf(value, sizeof(value), "%.3g", ratio);
      out << "<rect x=\"" << kLabel + kCell * c << "\" y=\"" << y << "\" width=\"" << kCell - 1
          << "\" height=\"" << kRow - 1 << "\" fill=\"" << ratio_colour(ratio) << "\"><title>"
          << escape_xml(map.row_labels[r]) << ", " << escape_xml(map.col_axis) << " "
          << escape_xml(map.col_labels[c]) << ": error/bound " << value << "</title></rect>";
    }
  }
  out << "</svg>";
  return out.str();
}

std::string kill_colour(int cases, int max_cases) {
  // Hue 120 (green) at one case down to 0 (red) at max_cases, log scale.
  const double t = max_cases > 1 ? std::log(std::max(cases, 1)) / std::log(max_cases) : 0;
  char text[40];
  std::snprintf(text, sizeof(text), "hsl(%d,60%%,72%%)",
                int(std::lround(120 * (1 - std::clamp(t, 0.0, 1.0)))));
  return text;
}

}  // namespace kvcheck::cli
