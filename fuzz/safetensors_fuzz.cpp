// safetensors_fuzz: the weights loader never crashes or reads out of bounds
// (ASan watches every read of the input), its two header readers (streaming,
// and the DOM one it falls back to) agree on every input, and every file it
// accepts round-trips: saving what was loaded and loading that again gives
// the same config and the same weight bits, also through the config-checked
// overload.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz/fuzz_target.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace kvcheck::fuzz {

const TargetTraits kTarget{"safetensors_fuzz", /*keep_rejected_in_corpus=*/true};

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "safetensors_fuzz: %s\n", message.c_str());
  std::fflush(stderr);
  std::abort();
}

// Bitwise, tensor by tensor: a file may hold NaNs, which == would call unequal.
void require_same_bits(const Config& config, const Weights& a, const Weights& b, const char* what) {
  const std::vector<TensorView> va = tensor_views(config, a), vb = tensor_views(config, b);
  if (va.size() != vb.size()) fail(std::string(what) + ": the tensor lists differ");
  for (size_t i = 0; i < va.size(); ++i) {
    const std::vector<float>& x = *va[i].data;
    const std::vector<float>& y = *vb[i].data;
    if (va[i].name != vb[i].name || x.size() != y.size() ||
        std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0) {
      fail(std::string(what) + ": tensor " + va[i].name + " differs after the round trip");
    }
  }
}

// Where the streaming reader accepts a header it must give what the DOM
// reader gives; where it gives up, the DOM reader's verdict is returned.
void require_same_header(std::span<const uint8_t> input) {
  const Result<SafetensorsHeader> fast = parse_safetensors_header(input);
  const Result<SafetensorsHeader> dom = parse_safetensors_header_dom(input);
  if (fast.ok() != dom.ok() || (!fast.ok() && fast.error() != dom.error()))
    fail("the header readers disagree: " + (fast.ok() ? "accepted" : fast.error()) + " / " +
         (dom.ok() ? "accepted" : dom.error()));
  if (!fast.ok()) return;
  const SafetensorsHeader &a = fast.value(), &b = dom.value();
  if (a.metadata != b.metadata) fail("the header readers disagree on __metadata__");
  if (a.data.data() != b.data.data() || a.data.size() != b.data.size())
    fail("the header readers disagree on the data section");
  if (a.tensors.size() != b.tensors.size()) fail("the header readers disagree on the tensors");
  for (auto x = a.tensors.begin(), y = b.tensors.begin(); x != a.tensors.end(); ++x, ++y) {
    const SafetensorsTensor &s = x->second, &t = y->second;
    if (x->first != y->first || s.dtype != t.dtype || s.shape != t.shape || s.begin != t.begin ||
        s.end != t.end || s.bytes.data() != t.bytes.data() || s.bytes.size() != t.bytes.size())
      fail("the header readers disagree on tensor " + x->first);
  }
}

}  // namespace

void initialize() {}

Outcome run_one(std::span<const uint8_t> input) {
  require_same_header(input);
  const Result<ModelFile> loaded = load_safetensors(input);
  if (!loaded.ok()) {
    if (loaded.error().empty()) fail("a rejected file must say why");
    return Outcome::kRejected;
  }
  const ModelFile& file = loaded.value();
  if (const std::string error = file.config.validate(); !error.empty()) {
    fail("accepted a file whose config does not validate: " + error);
  }
  if (const std::string error = check_shapes(file.config, file.weights); !error.empty()) {
    fail("accepted a file whose tensors do not fit its config: " + error);
  }
  std::vector<uint8_t> saved;
  try {
    saved = save_safetensors(file.config, file.weights);
  } catch (const std::exception& e) {
    fail(std::string("cannot save what was loaded: ") + e.what());
  }
  const Result<ModelFile> reloaded = load_safetensors(saved);
  if (!reloaded.ok()) fail("cannot load what was saved: " + reloaded.error());
  if (!(reloaded.value().config == file.config)) fail("the config changed in the round trip");
  require_same_bits(file.config, file.weights, reloaded.value().weights, "save+load");

  const Result<Weights> checked = load_safetensors(input, file.config);
  if (!checked.ok())
    fail("the config-checked load refuses the file's own config: " + checked.error());
  require_same_bits(file.config, file.weights, checked.value(), "config-checked load");
  return Outcome::kAccepted;
}

}  // namespace kvcheck::fuzz
