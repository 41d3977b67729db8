// The KV-cache calculator (`kvcheck memory`) against what the CPU engine
// really allocates and against the lesson's worked examples.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/cpu/cpu_engine.h"
#include "model/kv_memory.h"
#include "model/kv_presets.h"
#include "tools/kv_sizing.h"

namespace kvcheck {
namespace {

KvShape shape_of(const Config& c) {
  return {"test", c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.max_pos, 0};
}

Config with_heads(Config c, int layers, int heads, int kv_heads, int head_dim) {
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

// The lesson's model: 4096 hidden, 32 layers, 32 heads of 128.
KvShape lesson_shape(int kv_heads) {
  return {"lesson", 32, 4096, 32, kv_heads, 128, 32768, 0};
}

TEST(KvMemory, EqualsWhatTheCpuEngineAllocatesForEveryDtypeItHas) {
  const std::vector<Config> configs = {
      gpt2_tiny(), llama_tiny(), with_heads(llama_tiny(), 3, 4, 1, 8),  // MQA
      with_heads(llama_tiny(), 1, 6, 3, 6),  // GQA, head_dim not a power of two
      with_heads(gpt2_tiny(), 2, 6, 2, 5)};  // GQA, odd head_dim
  struct Sizes {
    int rows, capacity;
  };
  int compared = 0;
  for (const Config& c : configs) {
    ASSERT_EQ(c.validate(), "");
    const Weights weights = init_weights(c, 1);
    for (const Sizes z : {Sizes{1, 1}, Sizes{3, 40}, Sizes{8, c.max_pos}}) {
      for (const SizingDtype t : all_sizing_dtypes()) {
        // Only the dtypes the engine has; int8 joins once it does.
        const Result<KvDtype> engine_dtype = parse_kv_dtype(sizing_dtype_name(t));
        if (!engine_dtype) continue;
        EngineOptions o;
        o.max_rows = z.rows;
        o.capacity = z.capacity;
        o.kv_dtype = engine_dtype.value();
        const auto engine = make_cpu_engine(c, weights, o);
        EXPECT_EQ(kv_bytes(shape_of(c), t, uint64_t(z.capacity), uint64_t(z.rows)),
                  engine->memory().kv_bytes)
            << sizing_dtype_name(t) << " layers " << c.n_layers << " kv heads " << c.n_kv_heads
            << " head_dim " << c.head_dim << " rows " << z.rows << " capacity " << z.capacity;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 5 * 3 * 3);  // f32, bf16 and f16 today
}

TEST(KvMemory, TheLessonsWorkedExamples) {
  // 17.18 GB per sequence with 32 KV heads, 4.29 GB with 8.
  EXPECT_EQ(kv_bytes(lesson_shape(32), SizingDtype::kBF16, 32768, 1), 17179869184ull);
  EXPECT_EQ(kv_bytes(lesson_shape(8), SizingDtype::kBF16, 32768, 1), 4294967296ull);
  EXPECT_EQ(cli::gigabytes(17179869184ull), "17.18");
  EXPECT_EQ(cli::gibibytes(17179869184ull), "16.00");
  EXPECT_EQ(cli::gigabytes(4294967296ull), "4.29");
  EXPECT_EQ(cli::gibibytes(4294967296ull), "4.00");
  EXPECT_EQ(kv_bytes_per_token(lesson_shape(32), SizingDtype::kBF16), 524288u);
  EXPECT_EQ(kv_bytes(lesson_shape(32), SizingDtype::kBF16, 32768, 3), 3 * 17179869184ull);
}

TEST(KvMemory, Int8CountsOneF32ScalePerBlockOf32) {
  EXPECT_EQ(head_vector_bytes(128, SizingDtype::kInt8), 128u + 4 * 4);
  EXPECT_EQ(head_vector_bytes(32, SizingDtype::kInt8), 32u + 4);
  EXPECT_EQ(head_vector_bytes(33, SizingDtype::kInt8), 33u + 2 * 4);  // a short last block
  EXPECT_EQ(head_vector_bytes(8, SizingDtype::kInt8), 8u + 4);
  EXPECT_EQ(head_vector_bytes(128, SizingDtype::kF32), 512u);
  EXPECT_EQ(head_vector_bytes(128, SizingDtype::kBF16), 256u);
  EXPECT_EQ(head_vector_bytes(128, SizingDtype::kF16), 256u);
  // Llama-3-8B: 2 x 32 layers x 8 KV heads x 144 bytes.
  EXPECT_EQ(kv_bytes_per_token(*find_kv_preset("llama-3-8b"), SizingDtype::kInt8), 73728u);
}

TEST(KvMemory, SlidingWindowCapsTheCachedTokens) {
  const KvShape mistral = *find_kv_preset("mistral-7b");
  EXPECT_EQ(mistral.window, 4096);
  EXPECT_EQ(cached_tokens(mistral, 32768), 4096u);
  EXPECT_EQ(cached_tokens(mistral, 1000), 1000u);
  EXPECT_EQ(cached_tokens(*find_kv_preset("llama-3-8b"), 32768), 32768u);
}

TEST(KvMemory, PresetsHaveTheirPublishedShapes) {
  struct Want {
    const char* name;
    int layers, hidden, heads, kv_heads, head_dim, context, window;
  };
  for (const Want& w : {Want{"gpt2", 12, 768, 12, 12, 64, 1024, 0},
                        Want{"llama-3-8b", 32, 4096, 32, 8, 128, 8192, 0},
                        Want{"llama-3-70b", 80, 8192, 64, 8, 128, 8192, 0},
                        Want{"mistral-7b", 32, 4096, 32, 8, 128, 32768, 4096},
                        Want{"qwen2.5-7b", 28, 3584, 28, 4, 128, 131072, 0}}) {
    const std::optional<KvShape> s = find_kv_preset(w.name);
    ASSERT_TRUE(s) << w.name;
    EXPECT_EQ(s->validate(), "") << w.name;
    EXPECT_EQ(s->n_layers, w.layers) << w.name;
    EXPECT_EQ(s->hidden, w.hidden) << w.name;
    EXPECT_EQ(s->n_heads, w.heads) << w.name;
    EXPECT_EQ(s->n_kv_heads, w.kv_heads) << w.name;
    EXPECT_EQ(s->head_dim, w.head_dim) << w.name;
    EXPECT_EQ(s->max_context, w.context) << w.name;
    EXPECT_EQ(s->window, w.window) << w.name;
  }
  EXPECT_FALSE(find_kv_preset("gpt-5"));
}

TEST(KvMemory, SizesThatOverflow64BitsAreInputErrors) {
  const KvShape big = {"big", 1 << 30, 1, 1 << 30, 1 << 30, 1 << 30, 1, 0};
  EXPECT_THROW(kv_bytes(big, SizingDtype::kF32, 1, 1), InputError);
  EXPECT_THROW(kv_bytes(lesson_shape(32), SizingDtype::kF32, uint64_t{1} << 40, 1 << 20),
               InputError);
}

TEST(KvMemory, ShapeValidationNamesTheField) {
  KvShape s = lesson_shape(8);
  s.n_kv_heads = 5;
  EXPECT_EQ(s.validate(), "n_kv_heads: 5 does not divide n_heads 32");
  s.n_kv_heads = 0;
  EXPECT_EQ(s.validate(), "n_kv_heads: expected a positive integer, got 0");
  s = lesson_shape(8);
  s.window = -1;
  EXPECT_EQ(s.validate(), "window: expected 0 (none) or a positive integer, got -1");
}

TEST(KvSizing, HeadSchemesAndSavings) {
  cli::SizingRequest r{*find_kv_preset("llama-3-8b"), 8192, 2, all_sizing_dtypes()};
  const cli::KvSizing z = cli::size_kv_cache(r);
  EXPECT_EQ(z.scheme_dtype, SizingDtype::kBF16);
  ASSERT_EQ(z.schemes.size(), 3u);
  EXPECT_EQ(z.schemes[0].scheme, "MHA");
  EXPECT_EQ(z.schemes[1].scheme, "GQA");
  EXPECT_EQ(z.schemes[2].scheme, "MQA");
  EXPECT_TRUE(z.schemes[1].this_model);
  EXPECT_EQ(z.schemes[0].total, 4 * z.schemes[1].total);
  EXPECT_EQ(z.schemes[0].total, 32 * z.schemes[2].total);
  const std::string text = cli::sizing_text(z);
  EXPECT_NE(text.find("4x smaller (32/8)  <- this model"), std::string::npos) << text;
  EXPECT_NE(text.find("32x smaller (32/1)"), std::string::npos) << text;
  const nlohmann::json j = cli::sizing_json(z);
  EXPECT_EQ(j["head_schemes"]["rows"][1]["savings_vs_mha"], 4);
  EXPECT_EQ(j["dtypes"][1]["total_bytes"], uint64_t{2} * 131072 * 8192);

  // An MHA model gets a GQA row of 4 query heads per KV head where its heads allow.
  r.shape = *find_kv_preset("gpt2");
  const cli::KvSizing gpt2 = cli::size_kv_cache(r);
  ASSERT_EQ(gpt2.schemes.size(), 3u);
  EXPECT_TRUE(gpt2.schemes[0].this_model);
  EXPECT_EQ(gpt2.schemes[1].scheme, "GQA");
  EXPECT_EQ(gpt2.schemes[1].kv_heads, 3);
  EXPECT_EQ(gpt2.schemes[2].kv_heads, 1);
  r.shape.n_heads = r.shape.n_kv_heads = 6;
  EXPECT_EQ(cli::size_kv_cache(r).schemes.size(), 2u);  // MHA and MQA
  r.shape.n_kv_heads = 1;                               // an MQA model
  EXPECT_EQ(cli::size_kv_cache(r).schemes.size(), 2u);
  r.shape.n_heads = 8;
  const cli::KvSizing mqa = cli::size_kv_cache(r);
  ASSERT_EQ(mqa.schemes.size(), 3u);
  EXPECT_EQ(mqa.schemes[1].kv_heads, 2);
  EXPECT_TRUE(mqa.schemes[2].this_model);
}

TEST(KvSizing, NumbersForPeople) {
  EXPECT_EQ(cli::group_digits(0), "0");
  EXPECT_EQ(cli::group_digits(999), "999");
  EXPECT_EQ(cli::group_digits(1000), "1,000");
  EXPECT_EQ(cli::group_digits(17179869184ull), "17,179,869,184");
  EXPECT_EQ(cli::gigabytes(134217728), "0.134");
  EXPECT_EQ(cli::gibibytes(134217728), "0.125");
  EXPECT_EQ(cli::gigabytes(75497472), "0.0755");
  EXPECT_EQ(cli::gigabytes(0), "0.00");
}

}  // namespace
}  // namespace kvcheck
