// The CPU engine behind the C plugin ABI against the same engine in-tree:
// same traits (but fault switches), same verdicts, same logits bit for bit.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string_view>

#include "backends/in_tree.h"
#include "backends/registry.h"
#include "engine/traits_json.h"
#include "kvcheck/engine_plugin.h"
#include "model/config_json.h"
#include "model/weights.h"
#include "properties/runner.h"
#include "tests/backends/offload_round_trip.h"
#include "tests/backends/operation_faults.h"
#include "tests/backends/save_restore_round_trip.h"
#include "tests/properties/test_scenarios.h"

namespace kvcheck {
namespace {

const std::string kCpuPlugin = std::string("plugin:") + KVCHECK_CPU_PLUGIN;

std::vector<Scenario> hand_made_scenarios() {
  std::vector<Scenario> out = {
      test::rich_scenario(Family::kGpt2, 2, 2, KvDtype::kF32),
      test::rich_scenario(Family::kLlama, 4, 2, KvDtype::kF32),
      test::rich_scenario(Family::kLlama, 4, 1, KvDtype::kBF16),
      test::rich_scenario(Family::kGpt2, 2, 2, KvDtype::kF16),
  };
  out.push_back(test::minimal_fault_scenario(Fault::kMaskTopLeft));
  // Forks mid-sequence and at the end, truncations to 0 and across refeeds,
  // in contiguous and in paged storage.
  out.push_back(test::operations_scenario(Family::kLlama, 0, KvDtype::kF32));
  out.push_back(test::operations_scenario(Family::kGpt2, 0, KvDtype::kBF16));
  out.push_back(test::operations_scenario(Family::kLlama, 4, KvDtype::kF32));  // paged
  out.push_back(test::prefix_scenario(Family::kLlama, 2, 0));                  // prefix cache
  // Rings that wrap (their snapshots list positions through cache_positions)
  // and context shifts (erase, shift: the cells' positions, P6).
  out.push_back(test::window_scenario(Family::kLlama, 3, 2, KvDtype::kF32));
  out.push_back(test::window_scenario(Family::kGpt2, 4, 0, KvDtype::kBF16));
  out.push_back(test::context_shift_scenario());
  return out;
}

// The in-tree engine as the ABI carries it: the core calls and the
// operations of docs/OPERATIONS.md (no storage map, no fault switches, no
// prompt logits on a hit: no create argument asks for them).
EngineTraits plugin_traits() {
  EngineTraits t = cpu_engine_traits_with_operations();
  t.operations.storage_map = false;
  t.operations.prompt_logits = false;
  t.operations.div = false;  // the ABI does not carry div
  return t;
}

TEST(CpuPlugin, ResolvesWithTheInTreeTraitsButFaultSwitches) {
  const Backend plugin = backend_registry().resolve(kCpuPlugin);
  EngineTraits expected = plugin_traits();
  expected.identity.name = "kvcheck-cpu-plugin";
  expected.operations.fault_switches = false;
  EXPECT_EQ(traits_to_json(plugin.traits), traits_to_json(expected));
  EXPECT_EQ(plugin.spec, kCpuPlugin);
  EXPECT_FALSE(plugin.weakened);

  const Result<EngineTraits> again = traits_from_json(traits_to_json(plugin.traits));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(traits_to_json(again.value()), traits_to_json(plugin.traits));
}

TEST(CpuPlugin, EveryPropertyGivesTheInTreeVerdict) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  const EngineUnderTest cpu(cpu_engine_factory(), plugin_traits());
  int applicable = 0;
  int checked[kPropertyCount] = {};  // [property] scenarios it checked and passed
  for (const Scenario& s : hand_made_scenarios()) {
    ASSERT_EQ(s.validate(), "");
    for (int p = 0; p < kPropertyCount; ++p) {
      const Verdict a = check_property(Property(p), s, plugin);
      const Verdict b = check_property(Property(p), s, cpu);
      SCOPED_TRACE(std::string(property_label(Property(p))) + " on\n" + s.to_text());
      EXPECT_EQ(a.passed, b.passed) << test::describe(a) << "\nvs\n" << test::describe(b);
      EXPECT_EQ(a.applicable, b.applicable) << a.summary << " vs " << b.summary;
      EXPECT_EQ(a.worst_ratio, b.worst_ratio);
      EXPECT_EQ(a.summary, b.summary);
      applicable += a.applicable && a.passed;
      checked[p] += a.applicable && a.passed;
    }
  }
  // P10 has no reference here. P1-P9 check the twelve scenarios but about one
  // each that a scenario lacks (110 in all when the windows and the context
  // shift joined); P1 and P6 every one, the wrapped rings and the shifted
  // cells included (their positions cross the ABI); P11 and P12 the three
  // operations scenarios, P13 the paged and the prefix-cache ones, P14 every
  // scenario with a finish, reset, fork or truncation, P15 the prefix-cache
  // one (its reused rows and flushes cross the ABI).
  EXPECT_GE(applicable, 9 * 12 - 12 + 3 + 3 + 2 + 3 + 1);
  EXPECT_EQ(checked[int(Property::kOracle)], 12);
  EXPECT_EQ(checked[int(Property::kCacheState)], 12);
  EXPECT_EQ(checked[int(Property::kSharing)], 3);
  EXPECT_EQ(checked[int(Property::kRollback)], 3);
  EXPECT_EQ(checked[int(Property::kPool)], 2);
  EXPECT_GE(checked[int(Property::kPoison)], 3);
  EXPECT_EQ(checked[int(Property::kPrefix)], 1);
}

// The faults that live in the operations, switched on inside the plugin
// (the ABI carries no fault switches): each is caught through the plugin
// path with the in-tree verdicts.
// The ABI's appended offload and host_blocks (version 2).
TEST(CpuPlugin, OffloadGivesTheInTreeVerdicts) {
  test::expect_offload_through(backend_registry().resolve(kCpuPlugin).under_test());
}

// The ABI's appended save and restore (version 3). Their fault,
// restore_keeps_tail, reaches the plugin as every operation fault does
// (fault=, OperationFaultsAreCaughtThroughTheAbi); here P6 names it.
TEST(CpuPlugin, SaveAndRestoreGiveTheInTreeVerdicts) {
  test::expect_save_restore_through(backend_registry().resolve(kCpuPlugin).under_test());
  const EngineUnderTest faulty =
      backend_registry().resolve(kCpuPlugin + "?fault=restore_keeps_tail").under_test();
  const Verdict v = check_property(Property::kCacheState,
                                   test::minimal_fault_scenario(Fault::kRestoreKeepsTail), faulty);
  EXPECT_TRUE(v.applicable && !v.passed) << v.summary;
}

TEST(CpuPlugin, OperationFaultsAreCaughtThroughTheAbi) {
  test::expect_operation_faults_caught(
      [](const std::string& fault) {
        return backend_registry().resolve(kCpuPlugin + "?fault=" + fault).under_test();
      },
      backend_registry().resolve(kCpuPlugin).under_test());
}

// cache_positions carries a wrapped ring's slots and a context shift's
// cells: P6 holds through the ABI, and a shim that lists every position one
// too high (its K/V right) fails it on both.
TEST(CpuPlugin, SnapshotPositionsCrossTheAbi) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  const EngineUnderTest wrong =
      backend_registry().resolve(kCpuPlugin + "?positions=off_by_one").under_test();
  for (const Scenario& s : {test::window_scenario(Family::kLlama, 3, 2, KvDtype::kF32),
                            test::context_shift_scenario()}) {
    const Verdict clean = check_property(Property::kCacheState, s, plugin);
    EXPECT_TRUE(clean.applicable && clean.passed) << clean.summary;
    const Verdict v = check_property(Property::kCacheState, s, wrong);
    EXPECT_FALSE(v.passed) << s.to_text();
    EXPECT_NE(v.summary.find("position"), std::string::npos) << v.summary;
  }
}

// A fork through the ABI is a new sequence holding the parent's prefix: its
// logits are bitwise those of the in-tree engine's fork.
TEST(CpuPlugin, ForkAndTruncateGiveTheInTreeBits) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  for (const Scenario& s : {test::operations_scenario(Family::kLlama, 0, KvDtype::kF32)}) {
    const Weights weights = init_weights(s.config, s.weight_seed);
    const RunResult a = run_scenario(s, weights, plugin.factory);
    const RunResult b = run_scenario(s, weights, cpu_engine_factory());
    ASSERT_FALSE(a.engine_failed || a.threw) << a.error_message;
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (size_t q = 0; q < a.logits.size(); ++q) {
      ASSERT_EQ(a.logits[q].size(), b.logits[q].size());
      EXPECT_EQ(std::memcmp(a.logits[q].data(), b.logits[q].data(), a.logits[q].size() * 4), 0)
          << "sequence " << q;
    }
  }
}

TEST(CpuPlugin, LogitsAreBitwiseTheInTreeOnes) {
  const EngineUnderTest plugin = backend_registry().resolve(kCpuPlugin).under_test();
  const EngineFactory cpu = cpu_engine_factory();
  for (const Scenario& s : hand_made_scenarios()) {
    const Weights weights = init_weights(s.config, s.weight_seed);
    const RunResult a = run_scenario(s, weights, plugin.factory);
    const RunResult b = run_scenario(s, weights, cpu);
    ASSERT_FALSE(a.engine_failed || a.threw) << a.error_message;
    ASSERT_FALSE(b.engine_failed || b.threw) << b.error_message;
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (size_t q = 0; q < a.logits.size(); ++q) {
      ASSERT_EQ(a.logits[q].size(), b.logits[q].size());
      ASSERT_FALSE(a.logits[q].empty() && q == 0);
      EXPECT_EQ(std::memcmp(a.logits[q].data(), b.logits[q].data(), a.logits[q].size() * 4), 0)
          << "sequence " << q;
    }
  }
}

// The config reaches the plugin in two forms: parsed (config_values) from a
// kvcheck built with that part of the header, else only as JSON (a caller
// whose create_args end before it). Both give the same engine, and a bad
// value is refused the same way, naming the field.
class CreateArgsForms : public ::testing::Test {
 protected:
  void SetUp() override {
    void* library = dlopen(KVCHECK_CPU_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr) << dlerror();
    const auto entry =
        reinterpret_cast<kvcheck_plugin_entry_fn>(dlsym(library, KVCHECK_PLUGIN_ENTRY));
    ASSERT_NE(entry, nullptr);
    table_ = entry();
    for_each_tensor(
        config_, weights_,
        [&](std::string_view name, std::span<const int64_t> shape, const std::vector<float>& data) {
          names_.emplace_back(name);
          kvcheck_tensor t{};
          t.rank = int32_t(shape.size());
          for (size_t i = 0; i < shape.size(); ++i) t.shape[i] = shape[i];
          t.data = data.data();
          tensors_.push_back(t);
        });
    for (size_t i = 0; i < tensors_.size(); ++i) tensors_[i].name = names_[i].c_str();
    for (const ConfigValue& v : config_values(config_))
      values_.push_back({v.key.data(), v.text.empty() ? nullptr : v.text.data(), v.number});
  }

  kvcheck_create_args args(uint32_t struct_size) const {
    kvcheck_create_args a{};
    a.struct_size = struct_size;
    a.config_json = json_.c_str();
    a.tensors = tensors_.data();
    a.n_tensors = int64_t(tensors_.size());
    a.capacity = 8;
    a.max_rows = 2;
    a.kv_dtype = "f32";
    a.options = "";
    a.config_values = values_.data();
    a.n_config_values = int64_t(values_.size());
    return a;
  }

  // The logits of one token through a plugin engine made from `a`, or the
  // create error's message.
  std::vector<float> one_step(const kvcheck_create_args& a, std::string& error) const {
    kvcheck_error e{};
    kvcheck_engine* engine = table_->create(&a, &e);
    if (engine == nullptr) {
      error = e.message;
      return {};
    }
    int64_t id = 0;
    const int32_t token = 3;
    std::vector<float> logits(size_t(config_.vocab));
    EXPECT_EQ(table_->start(engine, &id, &e), KVCHECK_OK) << e.message;
    const kvcheck_batch_entry entry{id, &token, 1};
    EXPECT_EQ(table_->step(engine, &entry, 1, logits.data(), &e), KVCHECK_OK) << e.message;
    table_->destroy(engine);
    return logits;
  }

  const kvcheck_plugin_v1* table_ = nullptr;
  Config config_ = llama_tiny();
  Weights weights_ = init_weights(config_, 7);
  std::string json_ = config_to_json(config_).dump();
  std::vector<std::string> names_;
  std::vector<kvcheck_tensor> tensors_;
  std::vector<kvcheck_config_value> values_;
};

TEST_F(CreateArgsForms, ParsedAndJsonConfigsGiveTheSameEngine) {
  std::string error;
  const std::vector<float> parsed = one_step(args(sizeof(kvcheck_create_args)), error);
  ASSERT_EQ(error, "");
  const std::vector<float> from_json =
      one_step(args(offsetof(kvcheck_create_args, config_values)), error);
  ASSERT_EQ(error, "");
  EngineOptions options;
  options.capacity = 8;
  options.max_rows = 2;
  std::unique_ptr<Engine> in_tree = cpu_engine_factory()(config_, weights_, options);
  const int32_t token = 3;
  const BatchEntry entry{in_tree->start(), {&token, 1}};
  std::vector<float> expected;
  in_tree->step({&entry, 1}, expected);
  ASSERT_EQ(parsed.size(), expected.size());
  EXPECT_EQ(std::memcmp(parsed.data(), expected.data(), expected.size() * 4), 0);
  EXPECT_EQ(std::memcmp(from_json.data(), expected.data(), expected.size() * 4), 0);
}

TEST_F(CreateArgsForms, EachFormIsCheckedByName) {
  std::string error;
  values_.pop_back();  // qkv_bias
  one_step(args(sizeof(kvcheck_create_args)), error);
  EXPECT_EQ(error, "config.qkv_bias: missing");
  json_ = R"({"family": "llama"})";
  one_step(args(offsetof(kvcheck_create_args, config_values)), error);
  EXPECT_EQ(error, "config.n_layers: missing");
  json_ = "{not json";
  one_step(args(offsetof(kvcheck_create_args, config_values)), error);
  EXPECT_EQ(error, "config_json: not valid JSON");
}

TEST(CpuPlugin, UnknownPluginOptionIsAnInputError) {
  try {
    backend_registry().resolve(kCpuPlugin + "?colour=red");
    FAIL() << "resolved";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown option \"colour=red\""), std::string::npos)
        << e.what();
  }
  try {
    backend_registry().resolve(kCpuPlugin + "?fault=no_such_fault");
    FAIL() << "resolved";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_fault"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvcheck
