// The reply parser of the engine protocol (docs/ENGINE_PROTOCOL.md): bytes
// from the child -> one reply, "need more bytes", or a reason it is
// malformed. A pure function over a buffer, so that the client
// (backends/exec/exec_child.cpp), check-adapter and the fuzz target
// (fuzz/exec_reply_fuzz.cpp) share one definition, and nothing the child sends
// can make kvcheck crash or allocate past the limits below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/exec/exec_wire.h"

namespace kvcheck::wire {

constexpr int kMaxJsonDepth = 32;  // nesting of arrays and objects in a control frame

// What the request lets the reply carry: at most `max_payloads` payload
// frames of at most `max_payload_bytes` each (0, 0: no payloads).
struct ReplyLimits {
  size_t max_payloads = 0;
  size_t max_payload_bytes = 0;
};

// An error reply: {"error": {"kind": K, "message": M}} with a known kind,
// and optionally "trace": the last frames of the engine's own traceback,
// innermost last ("my_gpt.py:88 in forward: attn = q @ k.T"), at most
// kMaxTraceFrames strings.
constexpr size_t kMaxTraceFrames = 16;

struct WireError {
  std::string kind;  // one of the protocol's kinds ("capacity", ..., "internal")
  std::string message;
  std::vector<std::string> trace;  // [frame], innermost last; empty when none was sent
};

// The message, then each frame of the trace on a line of its own, "  at "
// before it: how kvcheck prints an engine's error, and the form the runner
// takes apart (a summary line, then the place).
std::string error_text(const WireError& error);

struct Reply {
  nlohmann::json control;                      // the reply's JSON object
  std::optional<WireError> error;              // set for an error reply
  std::vector<std::vector<uint8_t>> payloads;  // [payload][bytes], as declared
};

struct ReplyParse {
  enum class Status : uint8_t { kComplete, kIncomplete, kMalformed };
  Status status = Status::kIncomplete;
  // kComplete: the bytes the reply took; kIncomplete: the bytes the reply
  // needs at least, counted from the buffer's start (always more than given,
  // and at most max_reply_bytes(limits)).
  size_t size = 0;
  Reply reply;        // kComplete
  std::string error;  // kMalformed: why, naming the field and the value
};

// The largest reply these limits admit: what a client buffers at most.
size_t max_reply_bytes(const ReplyLimits& limits);

// Parses the reply at the start of `bytes` (which may hold more after it).
ReplyParse parse_reply(std::span<const uint8_t> bytes, const ReplyLimits& limits);

// The inverse, for the server side and for tests: the frames of a reply.
std::string encode_reply(const Reply& reply);

// The reply to "pool" (docs/ENGINE_PROTOCOL.md) as a PoolReport, or why it
// is malformed (a field missing or of the wrong type). Only the form is
// checked here: whether the counts add up is P13's verdict on the engine,
// not a protocol violation.
std::string parse_pool_reply(const nlohmann::json& control, PoolReport& out);

// The inverse, for the server side and for tests.
nlohmann::json encode_pool_reply(const PoolReport& pool);

// The optional "reused" of a step reply (prefix cache, docs/ENGINE_PROTOCOL.md):
// per entry, how many leading tokens came from the cache, each in [0, n) for
// an entry of n tokens; absent means none. Empty, or why it is malformed.
std::string parse_step_reused(const nlohmann::json& control, std::span<const BatchEntry> batch,
                              std::vector<int>& out);

// The optional "positions" of a cache reply (erase, shift, a sliding window's
// ring; docs/ENGINE_PROTOCOL.md): the absolute position each of the reply's
// `length` slots holds, each in [0, max_pos); absent means slot i holds
// position i (out empty). Empty, or why it is malformed. Whether they are
// the right positions is P6's verdict on the engine, not a protocol check.
std::string parse_cache_positions(const nlohmann::json& control, int length, int max_pos,
                                  std::vector<int32_t>& out);

// The range check of those positions, shared with the plugin ABI's
// cache_positions: empty, or the first outside [0, max_pos), named `what`[i].
std::string positions_problem(std::span<const int32_t> positions, int max_pos,
                              const std::string& what);

}  // namespace kvcheck::wire
