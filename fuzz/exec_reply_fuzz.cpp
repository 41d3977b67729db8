// exec_reply_fuzz: the engine protocol's reply parser (backends/exec_reply.h)
// on whatever a child might write. Nothing may crash it; "need more bytes"
// must ask for more than it was given and no more than the request's limits
// allow (so a client never buffers without bound); a reply it accepts must
// respect the limits, re-encode to frames that parse back to the same reply,
// and have no complete shorter prefix. Every complete reply's control frame
// also goes through the pool reply's parser (wire::parse_pool_reply): it must
// not crash, must say why it refuses, and a report it accepts must survive
// encode_pool_reply and parse back to the same report; the step reply's
// "reused" and the cache reply's "positions" parsers may only accept what
// fits.
//
// Input: 1 byte max_payloads (mod 4), 4 bytes max_payload_bytes (little
// endian, mod 2^20), then the child's stdout: any number of replies.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/exec_reply.h"
#include "fuzz/fuzz_target.h"

namespace kvcheck::fuzz {

const TargetTraits kTarget{"exec_reply_fuzz", /*keep_rejected_in_corpus=*/true};

namespace {

using wire::ReplyParse;

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "exec_reply_fuzz: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

bool same(const wire::Reply& a, const wire::Reply& b) {
  const bool errors_match =
      a.error.has_value() == b.error.has_value() &&
      (!a.error || (a.error->kind == b.error->kind && a.error->message == b.error->message &&
                    a.error->trace == b.error->trace));
  return errors_match && a.control == b.control && a.payloads == b.payloads;
}

bool same_pool(const PoolReport& a, const PoolReport& b) {
  return a.block_size == b.block_size && a.total == b.total && a.free == b.free &&
         a.used == b.used && a.cached == b.cached && a.host_total == b.host_total &&
         a.host_free == b.host_free && a.host_used == b.host_used &&
         a.host_cached == b.host_cached && a.refcounts == b.refcounts && a.tables == b.tables;
}

void check_pool(const nlohmann::json& control) {
  PoolReport pool;
  const std::string why = wire::parse_pool_reply(control, pool);
  if (!why.empty()) return;
  PoolReport again;
  if (!wire::parse_pool_reply(wire::encode_pool_reply(pool), again).empty())
    fail("an encoded pool report does not parse");
  if (!same_pool(pool, again)) fail("re-encoding changed the pool report");
}

void check_complete(std::span<const uint8_t> bytes, const ReplyParse& p,
                    const wire::ReplyLimits& limits) {
  const wire::Reply& r = p.reply;
  if (p.size < 4 || p.size > bytes.size()) fail("a complete reply's size is outside the input");
  if (r.payloads.size() > limits.max_payloads) fail("more payloads than the limits allow");
  for (const auto& payload : r.payloads)
    if (payload.size() > limits.max_payload_bytes) fail("a payload over the limit");
  if (r.error && !r.payloads.empty()) fail("an error reply with payloads");
  if (!r.control.is_object()) fail("a control frame that is not an object");
  const ReplyParse shorter = wire::parse_reply(bytes.first(p.size - 1), limits);
  if (shorter.status != ReplyParse::Status::kIncomplete)
    fail("a complete reply has a prefix that is not incomplete: " + shorter.error);
  const std::string encoded = wire::encode_reply(r);
  const auto* data = reinterpret_cast<const uint8_t*>(encoded.data());
  const ReplyParse again = wire::parse_reply({data, encoded.size()}, limits);
  if (again.status != ReplyParse::Status::kComplete)
    fail("the re-encoded reply does not parse: " + again.error);
  if (again.size != encoded.size() || !same(again.reply, r)) fail("re-encoding changed the reply");
  check_pool(r.control);
  // A step reply's "reused" against a fixed batch: any answer is an empty
  // string or a reason, and an accepted one fits every entry.
  static const int32_t tokens[] = {1, 2, 3};
  static const BatchEntry batch[] = {{0, {tokens, 3}}, {1, {tokens, 1}}};
  std::vector<int> reused;
  if (wire::parse_step_reused(r.control, batch, reused).empty() &&
      (reused.size() != 2 || reused[0] < 0 || reused[0] > 2 || reused[1] != 0))
    fail("an accepted \"reused\" that does not fit the batch");
  // A cache reply's "positions" for a reply of 3 slots and max_pos 8: an
  // accepted list has one position per slot, each in [0, 8).
  std::vector<int32_t> positions;
  if (wire::parse_cache_positions(r.control, 3, 8, positions).empty() && !positions.empty() &&
      (positions.size() != 3 ||
       std::any_of(positions.begin(), positions.end(), [](int32_t p) { return p < 0 || p >= 8; })))
    fail("accepted \"positions\" that do not fit the slots");
}

}  // namespace

void initialize() {}

Outcome run_one(std::span<const uint8_t> input) {
  if (input.size() < 5) return Outcome::kRejected;
  wire::ReplyLimits limits;
  limits.max_payloads = input[0] % 4;
  limits.max_payload_bytes = wire::read_le32(input.data() + 1) % (1u << 20);
  std::span<const uint8_t> rest = input.subspan(5);
  int replies = 0;
  while (!rest.empty()) {
    const ReplyParse p = wire::parse_reply(rest, limits);
    switch (p.status) {
      case ReplyParse::Status::kMalformed:
        if (p.error.empty()) fail("a malformed reply must say why");
        return Outcome::kRejected;
      case ReplyParse::Status::kIncomplete:
        if (p.size <= rest.size()) fail("incomplete, yet it asks for no more bytes than it has");
        if (p.size > wire::max_reply_bytes(limits)) fail("asks for more than the limits allow");
        return Outcome::kRejected;
      case ReplyParse::Status::kComplete:
        check_complete(rest, p, limits);
        rest = rest.subspan(p.size);
        ++replies;
        break;
    }
  }
  return replies > 0 ? Outcome::kAccepted : Outcome::kRejected;
}

}  // namespace kvcheck::fuzz
