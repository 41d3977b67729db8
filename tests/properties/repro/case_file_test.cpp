// The case-file format: a known case prints to known text, hand-written text
// parses, and every malformed file is refused with its line number and what
// was expected.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "properties/repro/case_file.h"

namespace kvcheck::test {
namespace {

CaseFile sample_case() {
  CaseFile c;
  c.scenario.config.family = Family::kLlama;
  c.scenario.config.n_layers = 2;
  c.scenario.config.d_model = 8;
  c.scenario.config.n_heads = 4;
  c.scenario.config.n_kv_heads = 2;
  c.scenario.config.head_dim = 2;
  c.scenario.config.d_ff = 12;
  c.scenario.config.vocab = 16;
  c.scenario.config.max_pos = 8;
  c.scenario.config.rope_theta = 500000.5;
  c.scenario.config.norm_eps = 1e-6;
  c.scenario.weight_seed = 18446744073709551615ull;
  c.scenario.capacity = 8;
  c.scenario.max_rows = 2;
  c.scenario.kv_dtype = KvDtype::kBF16;
  c.scenario.sequences = {{1, 2, 3}, {15}};
  c.scenario.calls = {Call::start(0),  Call::start(1),       Call::step({{0, 2}, {1, 1}}),
                      Call::finish(1), Call::step({{0, 1}}), Call::reset()};
  c.property = Property::kCompaction;
  c.faults = FaultSet(Fault::kCompactionTableOnly).with(Fault::kKvSwapped);
  c.backend = "cpu-reference";
  c.notes = {"first note", "second # note"};
  c.has_verdict = true;
  c.verdict.outcome = RecordedVerdict::Outcome::kFailed;
  c.verdict.where.call = 4;
  c.verdict.where.sequence = 0;
  c.verdict.where.position = 2;
  c.verdict.summary = "P5 compaction: s0 position 2: logits differ";
  return c;
}

constexpr const char* kSampleText = R"(kvcheck-case 1
# A kvcheck case (docs/CASE_FORMAT.md). Replay: kvcheck replay FILE
note first note
note second # note
property compaction
fault compaction_table_only,kv_swapped
backend cpu-reference

# model
family llama
n_layers 2
d_model 8
n_heads 4
n_kv_heads 2
head_dim 2
d_ff 12
vocab 16
max_pos 8
rope_theta 500000.5
norm_eps 1e-06
qkv_bias false
weight_seed 18446744073709551615

# engine
capacity 8
max_rows 2
kv_dtype bf16

# sequences: token ids in feed order
sequence s0: 1 2 3
sequence s1: 15

# schedule: one engine call per line, in order
start s0
start s1
step s0:2 s1:1
finish s1
step s0:1
reset

# the verdict seen when this file was written
verdict failed
where call=4 sequence=0 position=2
summary P5 compaction: s0 position 2: logits differ
)";

TEST(CaseFile, PrintsTheDocumentedText) {
  EXPECT_EQ(print_case(sample_case()), kSampleText);
}

TEST(CaseFile, ParsesItsOwnText) {
  const Result<CaseFile> parsed = parse_case(kSampleText);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed.value(), sample_case());
}

TEST(CaseFile, ReadsHandWrittenText) {
  // Keys in any order, comments, blank lines, tabs, CRLF, P-labels, no
  // verdict and no fault line (both optional).
  const std::string text =
      "kvcheck-case 1\r\n"
      "# hand-written\r\n"
      "sequence s0: 3   4\r\n"
      "start s0\r\n"
      "step\ts0:2\r\n"
      "property P1\r\n"
      "\r\n"
      "family gpt2\nn_layers 1\nd_model 4\nn_heads 1\nn_kv_heads 1\nhead_dim 2\nd_ff 4\n"
      "vocab 8\nmax_pos 4\nrope_theta 10000\nnorm_eps 1e-5\nqkv_bias true\nweight_seed 7\n"
      "capacity 4\nmax_rows 1\nkv_dtype f32\n";
  const Result<CaseFile> parsed = parse_case(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  const CaseFile& c = parsed.value();
  EXPECT_EQ(c.property, Property::kOracle);
  EXPECT_FALSE(c.faults.any());
  EXPECT_FALSE(c.has_verdict);
  EXPECT_EQ(c.scenario.sequences, (std::vector<std::vector<int32_t>>{{3, 4}}));
  EXPECT_EQ(c.scenario.calls, (std::vector<Call>{Call::start(0), Call::step({{0, 2}})}));
  EXPECT_TRUE(c.scenario.config.qkv_bias);
  EXPECT_EQ(c.scenario.config.norm_eps, 1e-5);
}

// Replaces the first line starting with `key ` (or equal to `key`) of the
// sample with `replacement` (no line when empty).
std::string with_line(const std::string& key, const std::string& replacement) {
  std::string text = kSampleText;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line == key || line.rfind(key + " ", 0) == 0) {
      text.replace(at, end - at + 1, replacement.empty() ? "" : replacement + "\n");
      return text;
    }
    at = end + 1;
  }
  ADD_FAILURE() << "no line " << key;
  return text;
}

struct Malformed {
  std::string name;
  std::string text;
  std::string message;
};

std::vector<Malformed> malformed_cases() {
  const std::string s = kSampleText;
  return {
      {"empty", "", "line 1: the file is empty; expected the first line \"kvcheck-case 1\""},
      {"no magic", "property oracle\n",
       "line 1: expected the first line \"kvcheck-case 1\", got \"property oracle\""},
      {"future version", "kvcheck-case 2\n",
       "line 1: unsupported case format version \"2\"; expected \"kvcheck-case 1\" (this kvcheck "
       "reads version 1)"},
      {"unknown key", with_line("backend", "colour blue"),
       "line 7: unknown key \"colour\"; expected one of note, property, fault, backend, engine, "
       "reference, model, model_hash, the model and engine fields (family ... kv_dtype, "
       "sliding_window, sliding_window_pattern, block_size, pool_blocks, prefix_cache, "
       "prompt_logits), "
       "sequence, cache_key, start, step, finish, reset, fork, truncate, flush, erase, shift, "
       "verify, abort, offload, save, restore, div, "
       "verdict, where, summary, prelude (docs/CASE_FORMAT.md)"},
      {"negative window", with_line("backend", "sliding_window -2"),
       "line 7: sliding_window: expected an integer in [0, 2147483647], got \"-2\""},
      // Found by case_file_fuzz in CI: a pattern without a window printed as
      // no window, so the file did not round-trip.
      {"pattern without window", with_line("backend", "sliding_window_pattern 2"),
       "line 7: invalid scenario: config: sliding_window_pattern: 2 needs a sliding_window > 0 "
       "(without a window the pattern must be 0)"},
      {"model without hash", with_line("backend", "model /tmp/my model"),
       "line 7: model: expected a line \"model_hash fnv1a64:...\" too (the hash of the "
       "checkpoint's files)"},
      {"hash without model", with_line("backend", "model_hash fnv1a64:0123456789abcdef"),
       "line 7: model_hash: expected a line \"model <folder>\" too"},
      {"bad model hash", with_line("backend", "model_hash sha256:00"),
       "line 7: model_hash: expected fnv1a64:<16 lowercase hex digits>, got \"sha256:00\""},
      {"empty model", with_line("backend", "model"),
       "line 7: model: expected the checkpoint folder's path"},
      {"unknown property", with_line("property", "property speed"),
       "line 5: property: unknown property \"speed\"; expected one of oracle, chunking, batch, "
       "reset, compaction, cache_state, gqa, determinism, capacity, cross_engine, sharing, "
       "rollback, pool, poison, prefix (or P1..P15)"},
      {"unknown fault", with_line("fault", "fault kv_swapped,bitflip"),
       "line 6: fault: unknown fault \"bitflip\"; expected none or one of shared_layer_cache, "
       "shared_rows, decode_position_zero, chunk_position_restart, position_lag_after_first, "
       "position_bump_per_layer, tiled_kv_heads, reset_keeps_kv, reset_keeps_position, "
       "mask_top_left, append_overwrites, compaction_table_only, rope_reapplied, kv_swapped, "
       "capacity_wraps, truncate_noop, truncate_keeps_position, reset_clears_layer0_only, "
       "cow_skipped, fork_shares_partial_block, freed_block_still_referenced, refcount_leak, "
       "block_aliasing, kv_scale_dropped, kv_scale_per_tensor, kv_scale_shared_kv, "
       "prefix_hash_only, prefix_hit_extra_block, refusal_leaves_half_table, window_off_by_one, "
       "window_per_chunk, ring_index_unwrapped, shift_keeps_k, shift_rotates_v, shift_wrong_sign, "
       "truncate_late, truncate_all_noop, truncate_keeps_last, abort_frees_cached, "
       "prefix_ignores_key, hit_prompt_logits_stale, offload_before_write, "
       "offload_counts_drift, restore_keeps_tail"},
      {"trailing comma in faults", with_line("fault", "fault kv_swapped,"),
       "line 6: fault: expected a fault name after the last comma"},
      {"empty backend", with_line("backend", "backend  "),
       "line 7: backend: expected a backend string (e.g. cpu)"},
      {"bad family", with_line("family", "family bert"),
       "line 10: family: expected gpt2 or llama, got \"bert\""},
      {"not an integer", with_line("n_layers", "n_layers two"),
       "line 11: n_layers: expected an integer in [0, 2147483647], got \"two\""},
      {"integer overflow", with_line("d_model", "d_model 99999999999"),
       "line 12: d_model: expected an integer in [0, 2147483647], got \"99999999999\""},
      {"negative", with_line("n_heads", "n_heads -4"),
       "line 13: n_heads: expected an integer in [0, 2147483647], got \"-4\""},
      {"extra value", with_line("vocab", "vocab 16 17"),
       "line 17: vocab: unexpected \"17\" after the value"},
      {"not a number", with_line("rope_theta", "rope_theta fast"),
       "line 19: rope_theta: expected a finite number (e.g. 1e-05), got \"fast\""},
      {"infinite", with_line("norm_eps", "norm_eps inf"),
       "line 20: norm_eps: expected a finite number (e.g. 1e-05), got \"inf\""},
      {"bad bool", with_line("qkv_bias", "qkv_bias yes"),
       "line 21: qkv_bias: expected true or false, got \"yes\""},
      {"bad seed", with_line("weight_seed", "weight_seed -1"),
       "line 22: weight_seed: expected an unsigned 64-bit integer, got \"-1\""},
      {"weights file", with_line("weight_seed", "weights_file model.safetensors"),
       "line 22: weights_file: loading weights from a file is not supported by case format 1; "
       "expected weight_seed <integer> (docs/CASE_FORMAT.md)"},
      {"bad dtype", with_line("kv_dtype", "kv_dtype f8"),
       "line 27: kv_dtype: expected f32, bf16, f16, q8_0, q4_0, q5_0 or q5_1, got \"f8\""},
      {"duplicate key", with_line("max_rows", "capacity 8"),
       "line 26: capacity: given twice (first on line 25); expected it once"},
      {"missing key", with_line("max_rows", ""),
       "at the end of the file (line 43): missing \"max_rows\"; expected a line \"max_rows "
       "<value>\" (docs/CASE_FORMAT.md)"},
      {"missing property", with_line("property", ""),
       "at the end of the file (line 43): missing \"property\"; expected a line \"property "
       "<value>\" "
       "(docs/CASE_FORMAT.md)"},
      {"sequence out of order", with_line("sequence s0:", "sequence s1: 1 2 3"),
       "line 30: sequence: expected s0 (sequences are listed in order from s0), got s1"},
      {"sequence without colon", with_line("sequence s0:", "sequence s0 1 2 3"),
       "line 30: sequence: expected \"sequence s0: <token ids>\", got \"s0\""},
      {"bad token", with_line("sequence s0:", "sequence s0: 1 x 3"),
       "line 30: token id: expected an integer in [0, 2147483647], got \"x\""},
      {"token outside vocab", with_line("sequence s0:", "sequence s0: 1 2 16"),
       "line 30: invalid scenario: sequence 0, token 2: id 16 is outside the vocabulary [0, 16)"},
      {"bad sequence ref", with_line("start s0", "start 0"),
       "line 34: start: expected a sequence as s<index> (e.g. s0), got \"0\""},
      {"start unknown sequence", with_line("start s1", "start s7"),
       "line 35: invalid scenario: call 1: start of sequence 7, which does not exist (there are "
       "2)"},
      {"empty step", with_line("step s0:2", "step"),
       "line 36: step: expected one or more chunks s<index>:<length>"},
      {"chunk without length", with_line("step s0:2", "step s0"),
       "line 36: step: expected a chunk s<index>:<length> (e.g. s0:3), got \"s0\""},
      {"zero chunk", with_line("step s0:2", "step s0:0 s1:1"),
       "line 36: step chunk length: expected an integer in [1, 2147483647], got \"0\""},
      {"feeds past its tokens", with_line("step s0:1", "step s0:5"),
       "line 38: invalid scenario: call 4: step feeds sequence 0 tokens 2..6 but it has only 3"},
      {"reset with argument", with_line("reset", "reset s0"),
       "line 39: reset: unexpected \"s0\" after the value"},
      {"bad verdict", with_line("verdict", "verdict maybe"),
       "line 42: verdict: expected failed, passed or not_applicable, got \"maybe\""},
      {"where without verdict", with_line("verdict", ""),
       "line 42: where/summary describe a verdict; expected a line \"verdict failed\" (or passed, "
       "not_applicable) too"},
      {"bad where field", with_line("where", "where row=3"),
       "line 43: where: unknown field \"row\"; expected call, sequence, position, layer, kv_head "
       "or positions"},
      {"where without value", with_line("where", "where call"),
       "line 43: where: expected name=value (e.g. call=3), got \"call\""},
      {"bad position range", with_line("where", "where positions=3"),
       "line 43: where: positions: expected first..last (e.g. 0..3), got \"3\""},
      {"config inconsistent", with_line("n_kv_heads", "n_kv_heads 3"),
       "line 14: invalid scenario: config: n_kv_heads: 3 does not divide n_heads 4"},
      {"capacity past max_pos", with_line("capacity", "capacity 9"),
       "line 25: invalid scenario: capacity: 9 is out of range [1, max_pos 8]"},
      {"binary junk", std::string("kvcheck-case 1\nfamily \x01\xff\n", 25),
       "line 2: family: expected gpt2 or llama, got \"\\xff\""},
      {"too large", "kvcheck-case 1\n" + std::string(kMaxCaseBytes, '#'),
       "the file has 4194319 bytes; expected at most 4194304"},
      {"too many sequences",
       [&] {
         std::string text = "kvcheck-case 1\n";
         for (int i = 0; i <= kMaxCaseSequences; ++i) {
           text += "sequence s" + std::to_string(i) + ": 1\n";
         }
         return text;
       }(),
       "line 1026: sequence: expected an integer in [0, 1023], got \"1024\""},
  };
}

// A --model case: the folder (spaces kept) and the hash round-trip; older
// files without them still parse (ParsesItsOwnText).
TEST(CaseFile, RecordsTheCheckpointOfAModelRun) {
  CaseFile c = sample_case();
  c.model_path = "/data/my checkpoints/gpt2";
  c.model_hash = "fnv1a64:0123456789abcdef";
  const std::string text = print_case(c);
  EXPECT_NE(text.find("\nmodel /data/my checkpoints/gpt2\nmodel_hash fnv1a64:0123456789abcdef\n"),
            std::string::npos)
      << text;
  const Result<CaseFile> parsed = parse_case(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed.value(), c);
  EXPECT_TRUE(parse_case(kSampleText).value().model_path.empty());
}

// The window keys (docs/OPERATIONS.md, "Sliding windows") are written only
// when a window is set and read back; files without them keep W = 0.
TEST(CaseFile, RoundTripsASlidingWindow) {
  CaseFile c = sample_case();
  c.scenario.config.sliding_window = 3;
  c.scenario.config.sliding_window_pattern = 2;
  const std::string text = print_case(c);
  EXPECT_NE(text.find("\nsliding_window 3\nsliding_window_pattern 2\n"), std::string::npos) << text;
  const Result<CaseFile> parsed = parse_case(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed.value(), c);
  EXPECT_EQ(print_case(sample_case()).find("sliding_window"), std::string::npos);
  EXPECT_EQ(parse_case(kSampleText).value().scenario.config.sliding_window, 0);
}

// div (docs/OPERATIONS.md, "Div") reads and prints back; d must be >= 1,
// and a truncate that would split the two cells a div put on one position
// is invalid (they are addressed together).
TEST(CaseFile, RoundTripsADivAndRefusesSplittingASharedPosition) {
  const std::string head =
      "kvcheck-case 1\nproperty cache_state\nfault none\nfamily llama\nn_layers 1\n"
      "d_model 4\nn_heads 1\nn_kv_heads 1\nhead_dim 2\nd_ff 4\nvocab 4\nmax_pos 8\n"
      "rope_theta 10000\nnorm_eps 1e-05\nqkv_bias false\nweight_seed 0\ncapacity 4\n"
      "max_rows 1\nkv_dtype f32\nsequence s0: 1 2 3\nstart s0\nstep s0:2\n";
  const Result<CaseFile> parsed = parse_case(head + "div s0 0 8 2\nstep s0:1\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed.value().scenario.calls[2], Call::div(0, 0, 8, 2));
  const std::string text = print_case(parsed.value());
  EXPECT_NE(text.find("\ndiv s0 0 8 2\n"), std::string::npos) << text;
  ASSERT_TRUE(parse_case(text).ok());
  EXPECT_EQ(parse_case(text).value(), parsed.value());
  EXPECT_EQ(parse_case(head + "div s0 0 8 0\n").error(),
            "line 23: div d: expected an integer in [1, 2147483647], got \"0\"");
  EXPECT_EQ(parse_case(head + "div s0 0 8 2\ntruncate s0 1\n").error(),
            "line 24: invalid scenario: call 3: truncate of 1 tokens from sequence 0: it would "
            "drop a cell at position 0 and keep another there");
  EXPECT_TRUE(parse_case(head + "div s0 0 8 2\ntruncate s0 2\n").ok());
}

TEST(CaseFile, RefusesMalformedFilesWithLineAndExpectation) {
  for (const Malformed& m : malformed_cases()) {
    const Result<CaseFile> parsed = parse_case(m.text);
    ASSERT_FALSE(parsed.ok()) << m.name << ": accepted";
    EXPECT_EQ(parsed.error(), m.message) << m.name;
  }
}

TEST(CaseFile, QuotesHostileInputShortAndEscaped) {
  const Result<CaseFile> parsed =
      parse_case("kvcheck-case 1\nfamily " + std::string(500, 'x') + "\"\n");
  ASSERT_FALSE(parsed.ok());
  EXPECT_LT(parsed.error().size(), 200u) << parsed.error();
}

TEST(CaseFile, BoundsTheTokensItHolds) {
  std::string text = "kvcheck-case 1\nsequence s0:";
  for (int i = 0; i <= kMaxCaseTokens; ++i) text += " 1";
  const Result<CaseFile> parsed = parse_case(text);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.error(), "line 2: sequence: more than 262144 tokens in the file");
}

TEST(CaseFile, ReadCaseFileNamesThePath) {
  const Result<CaseFile> missing = read_case_file("/nonexistent/x.case");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(), "/nonexistent/x.case: cannot open the file");
}

TEST(CaseFile, RecordVerdictKeepsOneLine) {
  Verdict v;
  v.property = Property::kOracle;
  v.passed = false;
  v.summary = "  two\nlines\t ";
  v.where.call = 3;
  v.where.first_bad_position = 2;  // half a range is dropped
  const RecordedVerdict r = record_verdict(v);
  EXPECT_EQ(r.summary, "two lines");
  EXPECT_EQ(r.where.call, 3);
  EXPECT_EQ(r.where.first_bad_position, -1);
  EXPECT_EQ(r.outcome, RecordedVerdict::Outcome::kFailed);
}

}  // namespace
}  // namespace kvcheck::test
