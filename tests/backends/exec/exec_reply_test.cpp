// wire::parse_reply on frames a broken child might write: each is refused
// with a message that names what is wrong, or asks for more bytes, and never
// for more than the request's limits.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "backends/exec/exec_reply.h"

namespace kvcheck::wire {
namespace {

using Status = ReplyParse::Status;

ReplyParse parse(const std::string& bytes, ReplyLimits limits = {}) {
  return parse_reply({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, limits);
}

std::string le32(uint32_t n) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out;
}

std::string f32s(int n) {
  std::string out(size_t(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float x = float(i) - 1.5f;
    std::memcpy(out.data() + 4 * i, &x, 4);
  }
  return out;
}

void expect_malformed(const ReplyParse& p, const std::string& words) {
  ASSERT_EQ(Status::kMalformed, p.status) << "size " << p.size;
  EXPECT_NE(p.error.find(words), std::string::npos) << p.error;
}

TEST(ExecReply, ParsesAStepReplyAndLeavesTheNextOne) {
  const std::string logits = f32s(6);
  const std::string bytes =
      frame(R"({"payloads":[24]})") + frame(logits) + frame(R"({"length":3})");
  const ReplyParse p = parse(bytes, {1, 24});
  ASSERT_EQ(Status::kComplete, p.status) << p.error;
  EXPECT_EQ(4 + 17 + 4 + 24u, p.size);
  ASSERT_EQ(1u, p.reply.payloads.size());
  EXPECT_EQ(0, std::memcmp(logits.data(), p.reply.payloads[0].data(), 24));
  EXPECT_FALSE(p.reply.error);
  EXPECT_EQ(bytes.size(), p.size + 4 + 12);
}

TEST(ExecReply, TruncatedFramesAskForExactlyWhatIsMissing) {
  const std::string control = R"({"payloads":[8,8]})";
  const std::string bytes = frame(control) + frame(f32s(2)) + frame(f32s(2));
  EXPECT_EQ(Status::kIncomplete, parse("").status);
  EXPECT_EQ(4u, parse(bytes.substr(0, 3), {2, 8}).size);
  EXPECT_EQ(4 + control.size(), parse(bytes.substr(0, 10), {2, 8}).size);  // inside the control
  for (size_t cut = 4 + control.size(); cut < bytes.size(); ++cut) {
    const ReplyParse p = parse(bytes.substr(0, cut), {2, 8});
    ASSERT_EQ(Status::kIncomplete, p.status) << cut;
    EXPECT_EQ(bytes.size(), p.size) << cut;  // known once the control frame is in
  }
  EXPECT_EQ(Status::kComplete, parse(bytes, {2, 8}).status);
}

TEST(ExecReply, OversizedLengthsAreRefusedBeforeAnyWait) {
  expect_malformed(parse(le32(0x7fffffff) + "garbage"),
                   "a control frame of 2147483647 bytes (the bound is 1048576)");
  // A payload over the request's limit: refused from the control frame alone.
  expect_malformed(parse(frame(R"({"payloads":[4000000000]})"), {1, 64}),
                   "a payload of 4000000000 bytes (at most 64 for this request)");
  expect_malformed(parse(frame(R"({"payloads":[4,4]})"), {1, 64}),
                   "\"payloads\" must be an array of at most 1 sizes");
  expect_malformed(parse(frame(R"({"payloads":[4]})"), {}), "at most 0 sizes");
  // Whatever the limits, an incomplete reply never asks for more than they admit.
  const ReplyParse p = parse(frame(R"({"payloads":[64]})"), {1, 64});
  ASSERT_EQ(Status::kIncomplete, p.status);
  EXPECT_LE(p.size, max_reply_bytes({1, 64}));
}

// A child that prints to stdout: its text is taken for a length prefix, and
// the message says so, quoting the text; binary garbage is not called text.
TEST(ExecReply, TextWhereAFrameBelongsIsSaidToBePrinted) {
  expect_malformed(parse("Hello world\nmore"),
                   "a control frame of 1819043144 bytes (the bound is 1048576); those bytes "
                   "read as text (\"Hello world...\"), so the child probably printed to stdout");
  const ReplyParse garbage = parse(le32(0x7fffffff) + "garbage");
  ASSERT_EQ(Status::kMalformed, garbage.status);
  EXPECT_EQ(garbage.error.find("read as text"), std::string::npos) << garbage.error;
}

TEST(ExecReply, BadJsonIsRefused) {
  expect_malformed(parse(frame("{not json")), "not a JSON object: {not json");
  expect_malformed(parse(frame("[1,2]")), "not a JSON object");
  expect_malformed(parse(frame("{} trailing")), "not a JSON object");
  expect_malformed(parse(frame(std::string(100, '[') + std::string(100, ']'))),
                   "nests deeper than 32");
  expect_malformed(parse(frame(R"({"payloads":"24"})"), {1, 64}), "\"payloads\" must be an array");
  expect_malformed(parse(frame(R"({"payloads":[-4]})"), {1, 64}), "a payload of -4 bytes");
  expect_malformed(parse(frame(R"({"payloads":[2.5]})"), {1, 64}), "a payload of 2.5 bytes");
}

TEST(ExecReply, WrongPayloadSizesAreRefused) {
  // Declared 24, the frame says 4.
  expect_malformed(
      parse(frame(R"({"payloads":[24]})") + frame(f32s(1)) + "xxxxxxxxxxxxxxxxxxxx", {1, 64}),
      "a payload frame of 4 bytes where the control frame declared 24");
  // Noticed as soon as the payload's length arrives, without its bytes.
  expect_malformed(parse(frame(R"({"payloads":[24]})") + le32(8), {1, 64}),
                   "a payload frame of 8 bytes where the control frame declared 24");
}

TEST(ExecReply, ErrorRepliesAreTyped) {
  const ReplyParse p =
      parse(frame(R"({"error":{"kind":"capacity","message":"sequence 3 is full"}})"));
  ASSERT_EQ(Status::kComplete, p.status) << p.error;
  ASSERT_TRUE(p.reply.error);
  EXPECT_EQ("capacity", p.reply.error->kind);
  EXPECT_EQ("sequence 3 is full", p.reply.error->message);
  expect_malformed(parse(frame(R"({"error":{"kind":"oops","message":"x"}})")),
                   "unknown error kind \"oops\"");
  expect_malformed(parse(frame(R"({"error":"capacity"})")), "\"error\" must be an object");
  expect_malformed(parse(frame(R"({"error":{"kind":"rows"}})")),
                   "\"error.message\" must be a string, got nothing");
  expect_malformed(parse(frame(R"({"error":{"kind":3,"message":"x"}})")),
                   "\"error.kind\" must be a string, got 3");
  expect_malformed(
      parse(frame(R"({"error":{"kind":"rows","message":"x"},"payloads":[4]})"), {1, 4}),
      "an error reply declares \"payloads\"");
}

TEST(ExecReply, EncodeIsTheInverse) {
  Reply r;
  r.control = {{"length", 1}, {"payloads", {8, 8}}};
  r.payloads = {{1, 2, 3, 4, 5, 6, 7, 8}, {8, 7, 6, 5, 4, 3, 2, 1}};
  const std::string bytes = encode_reply(r);
  const ReplyParse p = parse(bytes, {2, 8});
  ASSERT_EQ(Status::kComplete, p.status) << p.error;
  EXPECT_EQ(bytes.size(), p.size);
  EXPECT_EQ(r.control, p.reply.control);
  EXPECT_EQ(r.payloads, p.reply.payloads);
}

// The pool reply: its form is checked here, its arithmetic is P13's.
TEST(ExecReply, PoolRepliesParseAndMalformedOnesSayWhy) {
  PoolReport pool;
  const nlohmann::json ok = nlohmann::json::parse(
      R"({"block_size":4,"total":3,"free":1,"used":2,"cached":0,"refcounts":[2,1,0],)"
      R"("tables":[{"sequence":7,"blocks":[0,1]},{"sequence":9,"blocks":[0]}]})");
  ASSERT_EQ("", parse_pool_reply(ok, pool));
  EXPECT_EQ(4, pool.block_size);
  EXPECT_EQ(3, pool.total);
  EXPECT_EQ((std::vector<int>{2, 1, 0}), pool.refcounts);
  ASSERT_EQ(2u, pool.tables.size());
  EXPECT_EQ(9, pool.tables[1].first);
  EXPECT_EQ(std::vector<int>{0}, pool.tables[1].second);
  PoolReport again;
  ASSERT_EQ("", parse_pool_reply(encode_pool_reply(pool), again));
  EXPECT_EQ(pool.tables, again.tables);
  EXPECT_EQ(0, again.host_total);
  EXPECT_FALSE(encode_pool_reply(pool).contains("host")) << "a reply without a host tier changed";
  // A host tier (offload): its counts come back, and a malformed one says why.
  const nlohmann::json tiered = nlohmann::json::parse(
      R"({"block_size":4,"total":2,"free":1,"used":1,"cached":0,)"
      R"("host":{"total":2,"free":1,"used":1,"cached":0},"refcounts":[1,0,1,0],)"
      R"("tables":[{"sequence":1,"blocks":[2,0]}]})");
  ASSERT_EQ("", parse_pool_reply(tiered, again));
  EXPECT_EQ(2, again.host_total);
  EXPECT_EQ(1, again.host_free);
  EXPECT_EQ(1, again.host_used);
  EXPECT_EQ(tiered, encode_pool_reply(again));
  nlohmann::json no_used = tiered;
  no_used["host"].erase("used");
  EXPECT_NE(parse_pool_reply(no_used, again).find("\"host\".\"used\" is missing"),
            std::string::npos);
  // Counts that do not add up are the engine's bug, not malformed.
  nlohmann::json wrong = ok;
  wrong["free"] = 5;
  EXPECT_EQ("", parse_pool_reply(wrong, pool));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"total":3})", "\"block_size\" is missing"},
      {R"({"block_size":"4","total":3,"free":1,"used":2,"cached":0})",
       "\"block_size\" must be an integer, got \"4\""},
      {R"({"block_size":4,"total":3,"free":1,"used":2,"cached":0,"refcounts":[1,2.5],"tables":[]})",
       "an element of \"refcounts\" must be an integer, got 2.5"},
      {R"({"block_size":4,"total":3,"free":1,"used":2,"cached":0,"refcounts":[],"tables":[[1,[0]]]})",
       "an element of \"tables\" must be {\"sequence\": integer"},
      {R"({"block_size":4,"total":3,"free":1,"used":2,"cached":0,"refcounts":[],)"
       R"("tables":[{"sequence":1,"blocks":[9999999999]}]})",
       "an element of \"blocks\" must be an integer, got 9999999999"}};
  for (const auto& [text, why] : bad) {
    const std::string got = parse_pool_reply(nlohmann::json::parse(text), pool);
    EXPECT_NE(got.find(why), std::string::npos) << text << "\n" << got;
  }
}

// A step reply's "reused" (prefix cache): absent is none; present, one count
// per entry, each leaving at least one of its tokens computed.
TEST(StepReused, AbsentIsNoneAndEachCountIsCheckedAgainstItsEntry) {
  const int32_t three[] = {4, 5, 6}, one[] = {7};
  const BatchEntry batch[] = {{1, three}, {2, one}};
  std::vector<int> reused;
  ASSERT_EQ("", parse_step_reused(nlohmann::json::object(), batch, reused));
  EXPECT_EQ(reused, (std::vector<int>{0, 0}));
  ASSERT_EQ("", parse_step_reused(nlohmann::json::parse(R"({"reused":[2,0]})"), batch, reused));
  EXPECT_EQ(reused, (std::vector<int>{2, 0}));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"reused":3})", "\"reused\" must be an array of integers, got 3"},
      {R"({"reused":[1]})", "\"reused\" has 1 elements for 2 entries"},
      {R"({"reused":[3,0]})", "\"reused\"[0] is 3, outside [0, 3) for its 3 tokens"},
      {R"({"reused":[0,1]})", "\"reused\"[1] is 1, outside [0, 1) for its 1 tokens"},
      {R"({"reused":[-1,0]})", "\"reused\"[0] is -1"}};
  for (const auto& [text, why] : bad) {
    const std::string got = parse_step_reused(nlohmann::json::parse(text), batch, reused);
    EXPECT_NE(got.find(why), std::string::npos) << text << "\n" << got;
  }
}

// A cache reply's "positions" (erase, shift, a window's ring): absent is
// slot i at position i; present, one position per slot, each in [0, max_pos).
TEST(CachePositions, AbsentIsTheIdentityAndEachPositionIsChecked) {
  std::vector<int32_t> positions = {9};
  ASSERT_EQ("", parse_cache_positions(nlohmann::json::object(), 3, 16, positions));
  EXPECT_TRUE(positions.empty());
  ASSERT_EQ("", parse_cache_positions(nlohmann::json::parse(R"({"positions":[4,5,15]})"), 3, 16,
                                      positions));
  EXPECT_EQ(positions, (std::vector<int32_t>{4, 5, 15}));
  // Out of order is the engine's bug (P6), not a malformed reply.
  ASSERT_EQ(
      "", parse_cache_positions(nlohmann::json::parse(R"({"positions":[2,0]})"), 2, 16, positions));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"positions":"0,1"})", "\"positions\" must be an array of integers, got \"0,1\""},
      {R"({"positions":[0,1.5]})", "an element of \"positions\" must be an integer, got 1.5"},
      {R"({"positions":[0,4294967296]})",
       "an element of \"positions\" must be an integer, got 4294967296"},
      {R"({"positions":[0,1]})", "\"positions\" has 2 elements for length 3"},
      {R"({"positions":[0,1,16]})", "\"positions\"[2] is 16, outside [0, max_pos 16)"},
      {R"({"positions":[-1,1,2]})", "\"positions\"[0] is -1, outside [0, max_pos 16)"}};
  for (const auto& [text, why] : bad) {
    const std::string got = parse_cache_positions(nlohmann::json::parse(text), 3, 16, positions);
    EXPECT_NE(got.find(why), std::string::npos) << text << "\n" << got;
    EXPECT_TRUE(positions.empty()) << text;
  }
}

}  // namespace
}  // namespace kvcheck::wire
