// Writes the fuzz targets' seed corpora (corpus/seeds/<target>/) from
// Scenarios, so the seeds are reproducible and reviewable as code:
//   make_fuzz_seeds DIR          write DIR/<target>/<seed> files
//   make_fuzz_seeds --check DIR  exit 1 unless DIR holds exactly those files
// ctest runs --check, so a change of the framing or the formats that would
// silently change what a committed seed means fails until the seeds are
// regenerated (and reviewed).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backends/exec_wire.h"
#include "fuzz/schedule_program.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "properties/repro/case_file.h"

namespace {

namespace fs = std::filesystem;
using kvcheck::Call;
using kvcheck::fuzz::ProgramHeader;
using kvcheck::fuzz::ScheduleProgram;

using Files = std::map<std::string, std::vector<uint8_t>>;  // "<target>/<name>" -> bytes

struct ScheduleSeed {
  const char* name;
  ScheduleProgram program;
  kvcheck::Property property;  // the one its case-file twin names
};

ProgramHeader header(int family, int layers, int kv_heads, int group, int kv_dtype = 0) {
  ProgramHeader h;
  h.family = family;
  h.n_layers = layers;
  h.n_kv_heads = kv_heads;
  h.group = group;
  h.half_head_dim = 2;
  h.d_model = 8;
  h.d_ff = 16;
  h.vocab = 16;
  h.weight_seed = 7;
  h.token_seed = 11;
  h.kv_dtype = kv_dtype;
  return h;
}

constexpr int kGpt2 = 0, kLlama = 1;

// Each seed exercises one thing a KV cache does; together they cover prefill,
// decode, chunked prefill, ragged batches, finish with compaction, reset, row
// reuse, GQA/MQA, reduced-precision KV, a schedule that ends at capacity, and
// fork and truncate over paged storage.
std::vector<ScheduleSeed> schedule_seeds() {
  using kvcheck::Property;
  std::vector<ScheduleSeed> seeds;
  const auto add = [&](const char* name, ProgramHeader h, std::vector<Call> calls,
                       Property property) {
    seeds.push_back({name, ScheduleProgram{h, std::move(calls)}, property});
  };
  add("prefill_one_chunk", header(kGpt2, 1, 1, 1), {Call::start(0), Call::step({{0, 5}})},
      Property::kOracle);
  add("prefill_then_decode", header(kLlama, 2, 1, 1),
      {Call::start(0), Call::step({{0, 4}}), Call::step({{0, 1}}), Call::step({{0, 1}}),
       Call::step({{0, 1}})},
      Property::kCacheState);
  add("chunked_prefill", header(kLlama, 1, 2, 1),
      {Call::start(0), Call::step({{0, 3}}), Call::step({{0, 2}}), Call::step({{0, 4}})},
      Property::kChunking);
  add("ragged_batch", header(kGpt2, 2, 2, 1),
      {Call::start(0), Call::start(1), Call::start(2), Call::step({{0, 4}, {1, 1}, {2, 6}}),
       Call::step({{0, 1}, {1, 1}, {2, 1}}), Call::step({{1, 2}})},
      Property::kBatch);
  add("finish_compacts", header(kLlama, 1, 1, 2),
      {Call::start(0), Call::start(1), Call::start(2), Call::step({{0, 2}, {1, 3}, {2, 2}}),
       Call::finish(0), Call::step({{1, 1}, {2, 1}}), Call::finish(2), Call::step({{1, 1}})},
      Property::kCompaction);
  add("reset_then_reuse", header(kGpt2, 1, 1, 1),
      {Call::start(0), Call::start(1), Call::step({{0, 3}, {1, 2}}), Call::reset(), Call::start(2),
       Call::step({{2, 3}}), Call::step({{2, 1}})},
      Property::kReset);
  add("row_reused_after_finish", header(kGpt2, 1, 2, 2),
      {Call::start(0), Call::start(1), Call::step({{0, 2}, {1, 2}}), Call::finish(0),
       Call::start(2), Call::step({{2, 2}, {1, 1}}), Call::step({{2, 1}})},
      Property::kReset);
  add("gqa_four_over_two", header(kLlama, 2, 2, 2),
      {Call::start(0), Call::step({{0, 3}}), Call::step({{0, 1}})}, Property::kGqa);
  {
    ProgramHeader h = header(kGpt2, 1, 1, 4, /*kv_dtype=*/1);
    h.qkv_bias = 1;
    add("mqa_bf16_qkv_bias", h,
        {Call::start(0), Call::start(1), Call::step({{0, 2}, {1, 3}}),
         Call::step({{1, 1}, {0, 1}})},
        Property::kGqa);
  }
  {
    // q8_0 K/V over GQA: every KV head's block gets its own scale.
    ProgramHeader h = header(kLlama, 1, 2, 2, /*kv_dtype=*/3);
    add("gqa_q8_0", h, {Call::start(0), Call::step({{0, 3}}), Call::step({{0, 1}})},
        Property::kCacheState);
  }
  {
    ProgramHeader h = header(kLlama, 1, 1, 1, /*kv_dtype=*/2);
    h.max_pos_slack = 2;  // capacity == the schedule's end, max_pos beyond it
    add("fills_capacity_f16", h,
        {Call::start(0), Call::step({{0, 6}}), Call::step({{0, 1}}), Call::step({{0, 1}})},
        Property::kCapacity);
  }
  {
    ProgramHeader h = header(kLlama, 3, 2, 2);
    h.spare_rows = 1;
    h.capacity_slack = 2;
    add("mixed_everything", h,
        {Call::start(0), Call::step({{0, 5}}), Call::start(1), Call::step({{1, 3}, {0, 1}}),
         Call::finish(0), Call::start(2), Call::step({{2, 2}, {1, 1}}), Call::step({{2, 1}}),
         Call::reset()},
        Property::kDeterminism);
  }
  {
    // docs/OPERATIONS.md: a fork mid-block of paged storage, writes on both
    // sides of it, a truncation across blocks, a refeed.
    ProgramHeader h = header(kGpt2, 1, 1, 1);
    h.block_size = 2;
    add("fork_and_truncate_paged", h,
        {Call::start(0), Call::step({{0, 3}}), Call::fork(1, 0, 3), Call::step({{1, 2}, {0, 1}}),
         Call::truncate(0, 3), Call::step({{0, 2}}), Call::finish(1)},
        Property::kSharing);
  }
  {
    // docs/OPERATIONS.md: a prefix cache in a pool of 5 blocks of 2; every
    // prompt starts with the same 4 tokens: the second hits 2 cached blocks
    // of the finished first, the third 1 block the second holds (its chunk
    // of 4 leaves the last token to compute), then a flush and a decode.
    ProgramHeader h = header(kGpt2, 1, 1, 1);
    h.block_size = 2;
    h.prefix_cache = 1;
    h.pool_blocks = 5;
    h.shared_prefix = 4;
    add("prefix_cache_small_pool", h,
        {Call::start(0), Call::step({{0, 5}}), Call::finish(0), Call::start(1),
         Call::step({{1, 5}}), Call::start(2), Call::step({{2, 4}}), Call::flush(),
         Call::step({{1, 1}})},
        Property::kPrefix);
  }
  {
    // docs/OPERATIONS.md, "Sliding windows": W = 3 over a prompt of 7 in
    // chunks of 2 and 5 (the second wraps the ring), then decodes.
    ProgramHeader h = header(kLlama, 2, 1, 2);
    h.sliding_window = 3;
    add("sliding_window_wraps", h,
        {Call::start(0), Call::step({{0, 2}}), Call::step({{0, 5}}), Call::step({{0, 1}}),
         Call::step({{0, 1}})},
        Property::kChunking);
    // Gemma 2's alternation: layer 0 windowed, layer 1 global.
    h.window_pattern = 2;
    add("sliding_window_alternating", h,
        {Call::start(0), Call::step({{0, 4}}), Call::step({{0, 3}}), Call::step({{0, 1}})},
        Property::kOracle);
  }
  return seeds;
}

void add_schedule_files(Files& files) {
  for (const ScheduleSeed& seed : schedule_seeds()) {
    files[std::string("schedule_fuzz/") + seed.name] = kvcheck::fuzz::encode(seed.program);
  }
}

void add_case_files(Files& files) {
  bool with_fault = false;
  std::vector<kvcheck::PreludeCase> earlier;  // the seeds so far, as prelude cases
  for (const ScheduleSeed& seed : schedule_seeds()) {
    kvcheck::CaseFile c;
    c.scenario = kvcheck::fuzz::to_scenario(seed.program);
    c.property = seed.property;
    c.backend = "cpu";
    c.notes = {std::string("fuzz seed ") + seed.name};
    // Every other seed records a fault and a failing verdict, so both the
    // optional lines and their absence are in the corpus.
    if (with_fault) {
      c.faults = kvcheck::FaultSet(kvcheck::Fault::kSharedRows);
      c.has_verdict = true;
      c.verdict.outcome = kvcheck::RecordedVerdict::Outcome::kFailed;
      c.verdict.where.call = 1;
      c.verdict.where.sequence = 0;
      c.verdict.where.position = 0;
      c.verdict.summary = "seeded verdict for the parser";
    }
    with_fault = !with_fault;
    // One seed is a --model case, so the model and model_hash lines are in
    // the corpus too.
    if (std::string_view(seed.name) == "mixed_everything") {
      c.model_path = "/models/my checkpoint";
      c.model_hash = "fnv1a64:00112233445566ff";
    }
    // One seed records a prelude of the two seeds before it (a state leak
    // between cases), so the prelude blocks are in the corpus too.
    if (std::string_view(seed.name) == "row_reused_after_finish" && earlier.size() >= 2)
      c.prelude.assign(earlier.end() - 2, earlier.end());
    earlier.push_back({c.property, c.scenario});
    const std::string text = kvcheck::print_case(c);
    files[std::string("case_file_fuzz/") + seed.name + ".case"] = {text.begin(), text.end()};
  }
}

void add_safetensors_files(Files& files) {
  struct Model {
    const char* name;
    kvcheck::Config config;
  };
  std::vector<Model> models;
  {
    kvcheck::Config c;  // gpt2 with QKV bias, MHA
    c.n_layers = 1, c.d_model = 8, c.n_heads = 2, c.n_kv_heads = 2, c.head_dim = 4;
    c.d_ff = 16, c.vocab = 16, c.max_pos = 8, c.qkv_bias = true;
    models.push_back({"gpt2_mha_qkv_bias", c});
  }
  {
    kvcheck::Config c;  // llama GQA: 4 query heads over 2 KV heads
    c.family = kvcheck::Family::kLlama;
    c.n_layers = 2, c.d_model = 8, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 2;
    c.d_ff = 8, c.vocab = 16, c.max_pos = 8;
    models.push_back({"llama_gqa", c});
  }
  {
    kvcheck::Config c;  // gpt2 MQA
    c.n_layers = 1, c.d_model = 4, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 2;
    c.d_ff = 4, c.vocab = 8, c.max_pos = 4;
    models.push_back({"gpt2_mqa", c});
  }
  for (const Model& m : models) {
    files[std::string("safetensors_fuzz/") + m.name + ".safetensors"] =
        kvcheck::save_safetensors(m.config, kvcheck::init_weights(m.config, 3));
  }
}

// exec_reply_fuzz: the limits header (fuzz/exec_reply_fuzz.cpp) then replies
// as a child writes them, one seed per stage of a session.
void add_exec_reply_files(Files& files) {
  auto frame = [](std::string_view bytes) { return kvcheck::wire::frame(bytes); };
  auto f32s = [](std::initializer_list<float> values) {
    std::string out(values.size() * sizeof(float), '\0');
    std::memcpy(out.data(), values.begin(), out.size());
    return out;
  };
  auto seed = [&](const char* name, uint8_t max_payloads, uint32_t max_bytes,
                  const std::string& stream) {
    std::vector<uint8_t> bytes = {max_payloads};
    for (int i = 0; i < 4; ++i) bytes.push_back(uint8_t(max_bytes >> (8 * i)));
    bytes.insert(bytes.end(), stream.begin(), stream.end());
    files[std::string("exec_reply_fuzz/") + name] = bytes;
  };
  seed("hello", 0, 0,
       frame(R"({"protocol":1,"traits":{"identity":{"name":"seed","version":"1"},)"
             R"("invariance":{"chunking":"bounded","batch":"bounded"}}})"));
  const std::string logits = f32s({1.0f, -0.5f, 0.25f, 2.0f, 0.0f, -1.0f, 3.5f, 1e-3f});
  const std::string k = f32s({0.5f, -0.5f, 1.0f, -1.0f}), v = f32s({2.0f, 0.0f, -2.0f, 4.0f});
  seed("session", 2, 64,
       frame(R"({"model":1})") + frame(R"({"engine":2})") + frame(R"({"sequence":3})") +
           frame(R"({"payloads":[32]})") + frame(logits) +
           frame(R"({"length":2,"payloads":[16,16]})") + frame(k) + frame(v) +
           frame(R"({"length":2})") + frame("{}"));
  std::string errors;
  for (const char* kind : {"capacity", "rows", "unknown_sequence", "bad_batch", "bad_token",
                           "device", "input", "unsupported", "internal"}) {
    errors += frame(std::string(R"({"error":{"kind":")") + kind + R"(","message":"seed"}})");
  }
  seed("errors", 1, 16, errors);
  // An engine's error with the last frames of its traceback, innermost last.
  seed("error_trace", 0, 0,
       frame(R"J({"error":{"kind":"internal","message":"RuntimeError: shape mismatch",)J"
             R"J("trace":["my_gpt.py:88 in forward: x = self.attention(x)",)J"
             R"J("my_gpt.py:41 in attention: attn = q @ k.transpose(-2, -1)"]}})J"));
  // The optional operations' replies: fork (protocol 1 names the child,
  // protocol 2 echoes it or answers {}), truncate, and their refusals.
  seed("operations", 0, 0,
       frame(R"({"sequence":4})") + frame(R"({"sequence":5})") + frame("{}") + frame("{}") +
           frame(R"({"error":{"kind":"rows","message":"all 2 rows are taken"}})") +
           frame(R"({"error":{"kind":"bad_batch","message":"truncate of 9 tokens from 3"}})") +
           frame(R"({"error":{"kind":"unsupported","message":"the engine has no fork"}})"));
  // The paged storage introspection: a pool report (2 blocks of 4 slots, one
  // shared by two tables) and storage checks, clean and not.
  seed("pool", 0, 0,
       frame(R"({"block_size":4,"total":3,"free":1,"used":2,"cached":0,"refcounts":[2,1,0],)"
             R"("tables":[{"sequence":1,"blocks":[0,1]},{"sequence":2,"blocks":[0]}]})") +
           frame(R"({"problem":""})") +
           frame(R"({"problem":"block 2 slot 1 layer 0 holds 0.5, not NaN"})"));
  // A pool with a host tier (offload): device blocks 0-1, host blocks 2-3,
  // one table holding a block in each.
  seed("pool_host", 0, 0,
       frame(R"({"block_size":4,"total":2,"free":1,"used":1,"cached":0,)"
             R"("host":{"total":2,"free":1,"used":1,"cached":0},"refcounts":[1,0,1,0],)"
             R"("tables":[{"sequence":1,"blocks":[2,0]}]})"));
  // Cache replies listing their slots' positions (erase, shift, a window's
  // ring): 3 slots within max_pos 8 (the fuzz target's check), one outside.
  const std::string k3 = f32s({0.5f, -0.5f, 1.0f}), v3 = f32s({2.0f, 0.0f, -2.0f});
  seed("cache_positions", 2, 64,
       frame(R"({"length":3,"positions":[5,6,7],"payloads":[12,12]})") + frame(k3) + frame(v3) +
           frame(R"({"length":3,"positions":[0,2,3],"payloads":[12,12]})") + frame(k3) + frame(v3) +
           frame(R"({"length":3,"positions":[5,6,8],"payloads":[12,12]})") + frame(k3) + frame(v3));
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc == 3 && std::string_view(argv[1]) == "--check";
  if (!(argc == 2 && !std::string_view(argv[1]).starts_with("-")) && !check) {
    std::fprintf(stderr, "usage: %s [--check] DIR\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[argc - 1];
  Files files;
  add_schedule_files(files);
  add_case_files(files);
  add_safetensors_files(files);
  add_exec_reply_files(files);

  int problems = 0;
  for (const auto& [name, bytes] : files) {
    const fs::path path = root / name;
    if (check) {
      if (!fs::exists(path) || read_bytes(path) != bytes) {
        std::fprintf(stderr, "seed %s is missing or differs from what make_fuzz_seeds writes\n",
                     path.c_str());
        ++problems;
      }
      continue;
    }
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  for (const char* target :
       {"schedule_fuzz", "case_file_fuzz", "safetensors_fuzz", "exec_reply_fuzz"}) {
    if (!fs::is_directory(root / target)) continue;
    for (const auto& entry : fs::directory_iterator(root / target)) {
      const std::string name = std::string(target) + "/" + entry.path().filename().string();
      if (!entry.path().filename().string().starts_with(".") && !files.count(name)) {
        std::fprintf(stderr, "%s is not a seed make_fuzz_seeds writes%s\n", entry.path().c_str(),
                     check ? "" : " (left in place)");
        problems += check;
      }
    }
  }
  if (problems) {
    std::fprintf(stderr, "%d seed problems; regenerate with: make_fuzz_seeds %s\n", problems,
                 root.c_str());
    return 1;
  }
  std::printf("%zu seeds %s %s\n", files.size(), check ? "match" : "written to", root.c_str());
  return 0;
}
