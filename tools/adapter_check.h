// `kvcheck check-adapter`'s session with one exec: child (docs/ENGINE_PROTOCOL.md,
// "check-adapter"): every message of the protocol once, on tiny models whose
// answers the oracle knows, each reply one line of the report, so that an
// adapter's author learns which side is wrong:
//  - a protocol violation is the adapter's: a frame or reply that does not
//    parse, a missing reply, a field of the wrong type, payloads whose shape
//    disagrees with the traits and the request, a refusal of the wrong kind,
//    an error on a well-formed request;
//  - a cache bug is the engine's: logits or cached K/V the oracle disagrees
//    with (beyond the derived bound), a wrong length, a refusal that should
//    have come and did not;
//  - a refused shape is the traits': a model shape they allow that the engine
//    cannot load or step (declare the limit that excludes it).
// The requests and replies are in adapter_check.cpp, the sessions of the core
// calls and the operations in adapter_check_sessions.cpp, the shapes in
// adapter_check_shapes.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/exec/exec_child.h"
#include "backends/exec/exec_models.h"
#include "engine/traits.h"
#include "model/weights.h"

namespace kvcheck::cli {

// The tiny models' engines: capacity, rows (f32), and their weights' seed.
inline constexpr int kAdapterCapacity = 8;
inline constexpr int kAdapterMaxRows = 2;
inline constexpr uint64_t kAdapterWeightSeed = 12;

// The child failed in a way that ends the session (no reply, bad frame).
struct SessionOver {};

class AdapterCheck {
 public:
  AdapterCheck(const std::string& command, ChildWaits waits) : child_(command, waits) {}

  // The whole check; the exit code (0 clean, 1 anything found).
  int run();

 private:
  using json = nlohmann::json;

  // One step's entry: the sequence, all its tokens so far, how many are new.
  struct Fed {
    int64_t sequence;
    const std::vector<int32_t>* tokens;
    int fresh;
  };
  // What a layer's cache must hold: K and V [L][slots][KVH][D] with their
  // bounds, and the slots' positions (empty: slot i holds position i).
  struct CachedKv {
    const std::vector<double>&k, &v, &k_bound, &v_bound;
    std::vector<int32_t> positions;
  };
  // A model shape the traits allow: the tiny models and those shapes_session tries.
  struct Shape {
    std::string what;  // "gpt2 GQA (4 heads of 8 over 2 KV heads, d_model 32, d_ff 128)"
    Config config;
  };

  // The report's lines (adapter_check.cpp).
  void ok(const std::string& what);
  void violation(const std::string& what);
  void bug(const std::string& what);
  void refused_shape(const Shape& shape, const std::string& why);
  void summary() const;

  // Requests and replies (adapter_check.cpp).
  wire::Reply call(const std::string& what, const json& request, wire::ReplyLimits limits = {});
  std::optional<wire::Reply> call_ok(const std::string& what, const json& request,
                                     wire::ReplyLimits limits = {});
  std::optional<wire::Reply> call_ok_reply(const std::string& what, wire::Reply r);
  std::optional<int64_t> integer(const std::string& what, const wire::Reply& r, const char* key);
  void expect_refusal(const std::string& what, const json& request, const std::string& kind,
                      wire::ReplyLimits limits = {});
  std::optional<EngineTraits> hello();
  // A request that makes an id; an error reply is a violation, or, where the
  // request is the first of a `shape` (its load, its first create), that the
  // engine refused the shape.
  std::optional<int64_t> make(const std::string& what, json request, const char* key,
                              const Shape* shape = nullptr);
  std::optional<int64_t> create(const std::string& what, int64_t model,
                                const Shape* shape = nullptr);
  std::optional<int64_t> start(const std::string& what, int64_t engine);

  // Answers against the oracle (adapter_check.cpp).
  void compare_logits(const std::string& what, const Config& config, const Weights& weights,
                      const std::vector<int32_t>& tokens, int from, const float* rows);
  void compare_rows(const std::string& what, int V, const std::vector<double>& exact,
                    const std::vector<double>& bound, int from, int to, const float* rows,
                    const char* unit = "positions");
  void step(const std::string& what, const Config& config, const Weights& weights, int64_t engine,
            const std::vector<Fed>& fed);
  bool logits_of(const std::string& what, const wire::Reply& r, size_t n, int vocab,
                 std::vector<float>& logits);
  void length(const std::string& what, int64_t engine, int64_t sequence, int want);
  void cache(const std::string& what, const Config& config, const Weights& weights, int64_t engine,
             int64_t sequence, const std::vector<int32_t>& tokens);
  void cache_layer(const std::string& at, const Config& config, int64_t engine, int64_t sequence,
                   int layer, size_t T, const CachedKv& want);

  // Sessions (adapter_check_sessions.cpp, adapter_check_shapes.cpp).
  void model_session(const EngineTraits& traits, const Config& config);
  void refusals(const std::string& m, const OperationTraits& ops, int V, int64_t engine, int64_t s1,
                int64_t s2);
  void reuse_checks(const std::string& m, const OperationTraits& ops, const Config& config,
                    const Weights& weights, int64_t engine, int64_t s1, int64_t s2);
  void operations_session(const std::string& m, const OperationTraits& ops, const Config& config,
                          const Weights& weights, int64_t model);
  void context_shift_session(const std::string& m, const OperationTraits& ops, const Config& config,
                             const Weights& weights, int64_t model);
  void shift_refusals(const std::string& m, const OperationTraits& ops, int64_t engine, int64_t s,
                      int cells, int max_pos);
  void shapes_session(const EngineTraits& traits, const std::vector<Config>& checked);
  void shape_check(const Shape& shape);
  void op_unknown();

  ChildProcess child_;
  ModelFolders folders_;
  int checks_ = 0, violations_ = 0, bugs_ = 0, refused_shapes_ = 0;
  int version_ = 1;      // agreed in hello
  int64_t next_id_ = 0;  // the last id named (protocol 2)
};

// The tiny model with head_dim rounded up to the traits' multiple (ONNX
// Runtime's rotary needs 16s, a q8_0 cache 32s) and the traits' shape rules
// applied, so that such an engine is checked on a model it accepts.
Config fitted_for_adapter(Config c, const ShapeLimits& limits);

// The limit that would exclude a model the engine refused: mha_only for GQA
// or MQA, query_width_is_d_model where n_heads * head_dim != d_model,
// d_ff_is_4x_d_model for a gpt2 whose d_ff is not 4 * d_model, else the
// positions of the other family.
std::string limit_for(const Config& c);

}  // namespace kvcheck::cli
