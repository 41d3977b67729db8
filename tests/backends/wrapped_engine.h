// An engine that forwards every call to another, so a test can change one
// behaviour of a correct engine (a throwing finish, a 1-ulp wobble) and see
// what the properties make of it.
#pragma once

#include <memory>

#include "engine/engine.h"
#include "engine/engine_under_test.h"

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
  // The optional operations too, so that a wrapped engine keeps the
  // operations its traits declare.
  SequenceId fork(SequenceId parent, int n) override { return inner_->fork(parent, n); }
  void truncate(SequenceId sequence, int n) override { inner_->truncate(sequence, n); }
  void erase(SequenceId sequence, int p0, int p1) override { inner_->erase(sequence, p0, p1); }
  void shift(SequenceId sequence, int p0, int p1, int delta) override {
    inner_->shift(sequence, p0, p1, delta);
  }
  void div(SequenceId sequence, int p0, int p1, int d) override {
    inner_->div(sequence, p0, p1, d);
  }
  PoolReport pool() const override { return inner_->pool(); }
  std::string unheld_storage_check() const override { return inner_->unheld_storage_check(); }
  int reused(SequenceId sequence) const override { return inner_->reused(sequence); }
  void flush_prefix_cache() override { inner_->flush_prefix_cache(); }
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
