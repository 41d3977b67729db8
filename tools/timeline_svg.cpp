#include "tools/timeline_svg.h"

#include <algorithm>
#include <sstream>

#include "tools/run_report.h"

namespace kvcheck::cli {

namespace {

constexpr int kCell = 9, kLabel = 84, kCaption = 16;

std::string sequence_colour(int sequence) {
  static const int kHues[] = {210, 130, 280, 30, 180, 330, 60, 250};
  return "hsl(" + std::to_string(kHues[sequence % 8]) + ",60%,58%)";
}

constexpr const char* kPoisoned = "#eeeeee";
constexpr const char* kMixedColour = "#ff9800";
constexpr const char* kShared = "#d32f2f";       // rows are never shared: a fault
constexpr const char* kSharedBlock = "#7b1fa2";  // blocks are, by forks (copy on write)
constexpr const char* kStale = "#616161";

// The colour of one slot and what it means, for the cell and its tooltip.
std::pair<std::string, std::string> slot_look(const TimelineFrame& f, int unit, int slot) {
  const SlotState state = f.map.at(unit, slot);
  if (state == SlotState::kPoisoned) return {kPoisoned, "poisoned (never written or freed)"};
  if (state == SlotState::kMixed)
    return {kMixedColour, "partly poisoned: some layers or heads written"};
  const std::vector<int>& holders = f.holders[size_t(unit)];
  const bool held = slot < f.map.held_slots[size_t(unit)];
  if (held && holders.size() > 1) {
    return f.map.unit == "block"
               ? std::pair<std::string, std::string>{kSharedBlock,
                                                     "data of a block several sequences share"}
               : std::pair<std::string, std::string>{kShared,
                                                     "data in a row several sequences hold"};
  }
  if (held && holders.size() == 1) {
    return {sequence_colour(holders[0]), "data of s" + std::to_string(holders[0])};
  }
  return {kStale, "stale data: no running sequence holds this slot"};
}

std::string holders_text(const std::vector<int>& holders) {
  if (holders.empty()) return "free";
  std::string text;
  for (int s : holders) text += (text.empty() ? "s" : "+s") + std::to_string(s);
  return text;
}

}  // namespace

std::string timeline_frame_svg(const TimelineFrame& f) {
  const int units = std::min(f.map.units, kMaxTimelineUnits);
  const int slots = std::min(f.map.slots_per_unit, kMaxTimelineSlots);
  const bool cut = units < f.map.units || slots < f.map.slots_per_unit;
  const std::string caption =
      f.label + (cut ? " (first " + std::to_string(units) + " " + f.map.unit + "s, " +
                           std::to_string(slots) + " slots)"
                     : "");
  // 11px text runs about 6.5px a character; the frame is as wide as its caption.
  const int width = std::max(kLabel + kCell * slots + 4, int(caption.size()) * 13 / 2 + 4);
  std::ostringstream out;
  out << "<svg class=\"frame\" width=\"" << width << "\" height=\"" << kCaption + kCell * units + 4
      << "\" role=\"img\"><text x=\"0\" y=\"11\">" << escape_xml(caption) << "</text>";
  for (int u = 0; u < units; ++u) {
    const int y = kCaption + kCell * u;
    out << "<text class=\"axis\" x=\"" << kLabel - 4 << "\" y=\"" << y + 8
        << "\" text-anchor=\"end\">" << f.map.unit << " " << u << ": "
        << holders_text(f.holders[size_t(u)]) << "</text>";
    for (int s = 0; s < slots; ++s) {
      const auto [colour, meaning] = slot_look(f, u, s);
      const bool wrote = f.wrote[size_t(u) * size_t(f.map.slots_per_unit) + size_t(s)] != 0;
      out << "<rect x=\"" << kLabel + kCell * s << "\" y=\"" << y << "\" width=\"" << kCell - 1
          << "\" height=\"" << kCell - 1 << "\" fill=\"" << colour << "\""
          << (wrote ? " stroke=\"#000\" stroke-width=\"1.5\"" : "") << "><title>" << f.map.unit
          << " " << u << " slot " << s << ": " << escape_xml(meaning)
          << (wrote ? "; changed by this call" : "") << "</title></rect>";
    }
  }
  out << "</svg>";
  return out.str();
}

std::string timeline_legend_svg() {
  const std::pair<std::string, const char*> items[] = {
      {sequence_colour(0), "data of s0 (each sequence its colour)"},
      {kShared, "a row several sequences hold"},
      {kSharedBlock, "a block forks share"},
      {kStale, "stale data nobody holds"},
      {kMixedColour, "partly poisoned"},
      {kPoisoned, "poisoned"},
      {"#ffffff", "outlined: changed by the call"}};
  std::ostringstream body;
  int x = 0;
  for (const auto& [colour, text] : items) {
    const bool outline = std::string(text).rfind("outlined", 0) == 0;
    body << "<rect x=\"" << x << "\" y=\"4\" width=\"10\" height=\"10\" fill=\"" << colour << "\""
         << (outline ? " stroke=\"#000\" stroke-width=\"1.5\"" : "") << "/><text x=\"" << x + 14
         << "\" y=\"13\">" << text << "</text>";
    x += 14 + int(std::string(text).size()) * 13 / 2 + 14;
  }
  return "<svg width=\"" + std::to_string(x) + "\" height=\"18\" role=\"img\">" + body.str() +
         "</svg>";
}

}  // namespace kvcheck::cli
