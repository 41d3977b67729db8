// The framing and error vocabulary of the engine protocol
// (docs/ENGINE_PROTOCOL.md), shared by the client (backends/exec/exec.cpp) and the
// in-tree server (tools/kvcheck_serve.cpp) so that both read one definition.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "model/child_process_io.h"

namespace kvcheck::wire {

constexpr int kProtocolVersion = 2;              // the highest this kvcheck speaks
constexpr int kMinProtocolVersion = 1;           // the lowest it still speaks
constexpr uint32_t kMaxControlBytes = 1u << 20;  // a control frame's JSON

// The 4-byte little-endian length followed by the bytes.
std::string frame(std::string_view bytes);
uint32_t read_le32(const uint8_t* p);

// Wire names of EngineError kinds: "capacity", "rows", ...
const char* kind_name(EngineError::Kind kind);
std::optional<EngineError::Kind> parse_kind(std::string_view name);

// Blocking whole-buffer IO on a file descriptor (the server side; the client
// side polls with a deadline instead): model/child_process_io.h.
using kvcheck::read_exact;
using kvcheck::write_all;

// Polls `fds` without sleeping for up to `spin`: true as soon as one is
// ready (its revents set), false when the spin is over. A process that
// sleeps on a pipe must be woken by the writer, and on the paravirtualized
// machines measured that wake-up cost the writer and the sleeper tens of
// microseconds each, most of an exec case's round trip; a peer that answers
// within the spin is read without either (docs/PERFORMANCE.md, stop 26).
bool spin_until_ready(std::span<pollfd> fds, std::chrono::microseconds spin);

// The spin both sides use unless told otherwise: 100 us where this process
// may run on two CPUs or more, else none (a spinning process would hold the
// only CPU its peer needs to answer).
std::chrono::microseconds default_spin();

}  // namespace kvcheck::wire
