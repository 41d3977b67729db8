#include "backends/exec/exec_wire.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>

namespace kvcheck::wire {

namespace {

struct KindName {
  EngineError::Kind kind;
  const char* name;
};
constexpr KindName kKinds[] = {{EngineError::Kind::kCapacity, "capacity"},
                               {EngineError::Kind::kRows, "rows"},
                               {EngineError::Kind::kUnknownSequence, "unknown_sequence"},
                               {EngineError::Kind::kBadBatch, "bad_batch"},
                               {EngineError::Kind::kBadToken, "bad_token"},
                               {EngineError::Kind::kDevice, "device"}};

}  // namespace

std::string frame(std::string_view bytes) {
  const uint32_t n = uint32_t(bytes.size());
  std::string out;
  out.reserve(4 + bytes.size());
  for (int i = 0; i < 4; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out.append(bytes);
  return out;
}

uint32_t read_le32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

const char* kind_name(EngineError::Kind kind) {
  for (const KindName& k : kKinds) {
    if (k.kind == kind) return k.name;
  }
  return "internal";
}

std::optional<EngineError::Kind> parse_kind(std::string_view name) {
  for (const KindName& k : kKinds) {
    if (name == k.name) return k.kind;
  }
  return std::nullopt;
}

bool spin_until_ready(std::span<pollfd> fds, std::chrono::microseconds spin) {
  if (spin.count() <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + spin;
  do {
    if (::poll(fds.data(), nfds_t(fds.size()), 0) > 0) return true;
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

std::chrono::microseconds default_spin() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const bool two = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) >= 2;
  return std::chrono::microseconds(two ? 100 : 0);
}

}  // namespace kvcheck::wire
