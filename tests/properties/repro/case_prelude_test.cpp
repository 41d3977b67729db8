// A case file's prelude (docs/CASE_FORMAT.md, "Prelude"): the cases a
// failure of a leaking engine needs before it round-trip in blocks, a file
// written before preludes existed still reads the same, and a malformed block
// is refused with its line number.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "properties/repro/case_file.h"

namespace kvcheck::test {
namespace {

// A case without a prelude, as every file before preludes was written (its
// header, a comment, gives the whole replay command since issue 31).
constexpr const char* kOldCase = R"(kvcheck-case 1
# A kvcheck case (docs/CASE_FORMAT.md). Replay: kvcheck replay --backend 'exec:python3 engine.py' FILE
note written before preludes existed
property oracle
fault none
backend exec:python3 engine.py

# model
family gpt2
n_layers 1
d_model 4
n_heads 1
n_kv_heads 1
head_dim 2
d_ff 4
vocab 8
max_pos 4
rope_theta 10000
norm_eps 1e-05
qkv_bias false
weight_seed 7

# engine
capacity 4
max_rows 1
kv_dtype f32

# sequences: token ids in feed order
sequence s0: 0 1

# schedule: one engine call per line, in order
start s0
step s0:2

# the verdict seen when this file was written
verdict failed
where call=1 sequence=0 position=0
summary P1 oracle: s0 position 0: error/bound 9 > 1
)";

// Two prelude cases: the second on another model (llama), with a window.
constexpr const char* kPrelude = R"(
# prelude: cases that run first, in this order, in the same fresh engine
# process as the case (replay and shrink run them before it)
prelude begin
property chunking
family gpt2
n_layers 1
d_model 4
n_heads 1
n_kv_heads 1
head_dim 2
d_ff 4
vocab 8
max_pos 4
rope_theta 10000
norm_eps 1e-05
qkv_bias false
weight_seed 3
capacity 4
max_rows 1
kv_dtype f32
sequence s0: 5
start s0
step s0:1
prelude end
prelude begin
property oracle
family llama
n_layers 2
d_model 4
n_heads 2
n_kv_heads 1
head_dim 2
d_ff 4
vocab 8
max_pos 6
rope_theta 10000
norm_eps 1e-06
qkv_bias false
sliding_window 2
sliding_window_pattern 2
weight_seed 9
capacity 6
max_rows 2
kv_dtype bf16
sequence s0: 1 2 3
sequence s1: 4
start s0
start s1
step s0:2 s1:1
finish s1
step s0:1
prelude end
)";

// The first block of kPrelude alone (a gpt2 case of the sample's config but
// its weights), from "prelude begin" to "prelude end".
std::string first_block() {
  const std::string all = kPrelude;
  const size_t begin = all.find("prelude begin");
  return all.substr(begin, all.find("prelude begin", begin + 1) - begin);
}

CaseFile parsed(const std::string& text) {
  const Result<CaseFile> c = parse_case(text);
  EXPECT_TRUE(c.ok()) << c.error();
  return c.ok() ? c.value() : CaseFile{};
}

TEST(CasePrelude, AFileWithoutAPreludeReadsAsBefore) {
  const CaseFile c = parsed(kOldCase);
  EXPECT_TRUE(c.prelude.empty());
  EXPECT_EQ(c.property, Property::kOracle);
  EXPECT_EQ(print_case(c), kOldCase) << "a case without a prelude prints as before";
}

TEST(CasePrelude, RoundTripsInBlocksAfterTheVerdict) {
  const std::string text = std::string(kOldCase) + kPrelude;
  const CaseFile c = parsed(text);
  ASSERT_EQ(c.prelude.size(), 2u);
  EXPECT_EQ(c.prelude[0].property, Property::kChunking);
  EXPECT_EQ(c.prelude[0].scenario.weight_seed, 3u);
  EXPECT_EQ(c.prelude[0].scenario.calls, (std::vector<Call>{Call::start(0), Call::step({{0, 1}})}));
  const Scenario& second = c.prelude[1].scenario;
  EXPECT_EQ(second.config.family, Family::kLlama);
  EXPECT_EQ(second.config.sliding_window, 2);
  EXPECT_EQ(second.kv_dtype, KvDtype::kBF16);
  EXPECT_EQ(second.sequences, (std::vector<std::vector<int32_t>>{{1, 2, 3}, {4}}));
  EXPECT_EQ(second.calls.size(), 5u);
  // The case's own lines are untouched by the blocks after them.
  EXPECT_EQ(c.scenario.sequences, (std::vector<std::vector<int32_t>>{{0, 1}}));
  EXPECT_EQ(print_case(c), text);
  EXPECT_EQ(parsed(print_case(c)), c);
}

// A block may come anywhere among the case's lines; printing moves it last.
TEST(CasePrelude, ABlockBeforeTheCaseLinesReadsTheSame) {
  const std::string old = kOldCase;
  const size_t model = old.find("\n# model");
  const std::string text = old.substr(0, model) + kPrelude + old.substr(model);
  EXPECT_EQ(parsed(text), parsed(old + kPrelude));
}

// The sample with a prelude whose line `key` (the first such line inside
// the blocks) is replaced by `replacement` (none when empty).
std::string with_block_line(const std::string& key, const std::string& replacement) {
  std::string text = std::string(kOldCase) + kPrelude;
  const size_t blocks = text.find("# prelude");
  const size_t at = text.find("\n" + key, blocks) + 1;
  const size_t end = text.find('\n', at);
  text.replace(at, end - at + 1, replacement.empty() ? "" : replacement + "\n");
  return text;
}

TEST(CasePrelude, RefusesMalformedBlocksWithLineAndExpectation) {
  const std::string base = std::string(kOldCase) + kPrelude;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with_block_line("prelude end", ""),
       "line 63: prelude begin: the prelude block begun on line 42 is still open; expected "
       "\"prelude end\" first"},
      {base + "prelude begin\nproperty oracle\n",
       "at the end of the file (line 93): the prelude block begun on line 92 is not closed; "
       "expected a line \"prelude end\""},
      {base + "prelude end\n",
       "line 92: prelude end: no prelude block is open; expected \"prelude begin\" first"},
      {with_block_line("prelude begin", "prelude start"),
       "line 42: prelude: expected begin or end, got \"start\""},
      {with_block_line("property chunking", "fault shared_rows"),
       "line 43: fault: not allowed in a prelude block (begun on line 42): a prelude case runs "
       "on the case's backend, faults and model and records no verdict; expected property, the "
       "model and engine fields, sequence and the calls"},
      {with_block_line("property chunking", "verdict failed"),
       "line 43: verdict: not allowed in a prelude block (begun on line 42): a prelude case "
       "runs on the case's backend, faults and model and records no verdict; expected property, "
       "the model and engine fields, sequence and the calls"},
      {with_block_line("capacity", ""),
       "line 62: the prelude block begun on line 42: missing \"capacity\"; expected a line "
       "\"capacity <value>\" (docs/CASE_FORMAT.md)"},
      {with_block_line("step s0:1", "step s0:2"),
       "line 62: invalid prelude case (begun on line 42): call 1: step feeds sequence 0 tokens "
       "0..1 but it has only 1"},
      {with_block_line("capacity", "capacity 5"),
       "line 57: invalid prelude case (begun on line 42): capacity: 5 is out of range [1, "
       "max_pos 4]"},
      {with_block_line("weight_seed", "weight_seed 3\nweight_seed 4"),
       "line 57: weight_seed: given twice (first on line 56); expected it once"},
  };
  for (const auto& [text, message] : cases) {
    const Result<CaseFile> c = parse_case(text);
    ASSERT_FALSE(c.ok()) << "accepted:\n" << text;
    EXPECT_EQ(c.error(), message);
  }
}

// A --model case's prelude runs on the same checkpoint, so on its config.
TEST(CasePrelude, AModelCasesPreludeHasTheCasesConfig) {
  const std::string model = "model /models/mine\nmodel_hash fnv1a64:0123456789abcdef\n";
  std::string text = std::string(kOldCase) + kPrelude;
  text.insert(text.find("family gpt2"), model);
  const Result<CaseFile> refused = parse_case(text);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error(),
            "line 66: prelude: this case's model differs from the case's; the prelude of a "
            "--model case runs on the same checkpoint");
  std::string same = std::string(kOldCase) + first_block();
  same.insert(same.find("family gpt2"), model);
  EXPECT_EQ(parsed(same).prelude.size(), 1u);
}

TEST(CasePrelude, BoundsThePreludeCases) {
  std::string text = kOldCase;
  for (int i = 0; i <= kMaxCasePrelude; ++i) text += first_block();
  const Result<CaseFile> c = parse_case(text);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("prelude: more than 64 prelude cases"), std::string::npos) << c.error();
  EXPECT_EQ(parsed(std::string(kOldCase) + first_block()).prelude.size(), 1u);
}

}  // namespace
}  // namespace kvcheck::test
