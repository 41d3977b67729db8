// An engine that forwards every call to another, so a test can change one
// behaviour of a correct engine (a throwing finish, a 1-ulp wobble) and see
// what the properties make of it.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "properties/property.h"

namespace kvcheck::test {

class WrappedEngine : public Engine {
 public:
  explicit WrappedEngine(std::unique_ptr<Engine> inner) : inner_(std::move(inner)) {}

  const Config& config() const override { return inner_->config(); }
  const EngineOptions& options() const override { return inner_->options(); }
  std::string name() const override { return inner_->name(); }
  SequenceId start() override { return inner_->start(); }
  void step(std::span<const BatchEntry> batch, std::vector<float>& logits) override {
    inner_->step(batch, logits);
  }
  void finish(SequenceId sequence) override { inner_->finish(sequence); }
  void reset() override { inner_->reset(); }
  int length(SequenceId sequence) const override { return inner_->length(sequence); }
  CacheSnapshot cache(SequenceId sequence, int layer) const override {
    return inner_->cache(sequence, layer);
  }
  MemoryReport memory() const override { return inner_->memory(); }

 protected:
  std::unique_ptr<Engine> inner_;
};

// A factory making Wrapper(inner engine) around every engine `inner` makes.
template <typename Wrapper>
EngineFactory wrapping(EngineFactory inner) {
  return [inner](const Config& c, const Weights& w, const EngineOptions& o) {
    return std::unique_ptr<Engine>(std::make_unique<Wrapper>(inner(c, w, o)));
  };
}

}  // namespace kvcheck::test
