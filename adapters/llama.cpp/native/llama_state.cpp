// The reader of llama_state.h: the byte layout of
// llama_context::state_seq_get_data and llama_kv_cache::state_write,
// state_write_meta and state_write_data (llama.cpp v0.5.0).
#include "llama_state.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace kvcheck::llama_native {
namespace {

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <class T>
  T get(const char* what) {
    T value;
    take(&value, sizeof(T), what);
    return value;
  }
  void take(void* out, size_t n, const char* what) {
    if (n > bytes_.size() - at_)
      throw std::runtime_error(std::string("llama state: ends inside ") + what);
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
  }
  bool done() const { return at_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("llama state: " + what);
}

// V of every layer: rows of cells, or (v_trans) rows of elements.
void read_v(Reader& in, bool v_trans, uint32_t cells, int width, StoredSequence& s) {
  for (auto& v : s.v) {
    expect(in.get<int32_t>("a V type") == 0, "V is not F32 (type 0)");
    v.assign(size_t(cells) * size_t(width), 0.0f);
    if (!v_trans) {
      expect(in.get<uint64_t>("a V row size") == uint64_t(width) * 4, "V row size");
      in.take(v.data(), v.size() * 4, "V");
      continue;
    }
    expect(in.get<uint32_t>("a V element size") == 4, "V element size");
    expect(in.get<uint32_t>("a V width") == uint32_t(width), "V width");
    for (int j = 0; j < width; ++j) {
      for (uint32_t c = 0; c < cells; ++c)
        v[size_t(c) * size_t(width) + size_t(j)] = in.get<float>("V");
    }
  }
}

}  // namespace

StoredSequence parse_sequence_state(std::span<const uint8_t> bytes, int layers, int width) {
  Reader in(bytes);
  StoredSequence s;
  // llama_context::state_seq_get_data's header: its magic and the sequence id.
  expect(in.get<uint32_t>("the magic") == 0xaf143cd8u, "magic is not 0xaf143cd8");
  in.get<int32_t>("the sequence id");
  const uint32_t streams = in.get<uint32_t>("the stream count");
  for (uint32_t stream = 0; stream < streams; ++stream) {
    const uint32_t cells = in.get<uint32_t>("a cell count");
    if (cells == 0) continue;
    expect(s.positions.empty(), "the sequence's cells lie in two streams");
    for (uint32_t c = 0; c < cells; ++c) {
      s.positions.push_back(in.get<int32_t>("a position"));
      const uint32_t n_seq = in.get<uint32_t>("a sequence count");
      for (uint32_t i = 0; i < n_seq; ++i) in.get<int32_t>("a sequence id");
    }
    const bool v_trans = in.get<uint32_t>("v_trans") != 0;
    expect(in.get<uint32_t>("the layer count") == uint32_t(layers), "layer count");
    s.k.assign(size_t(layers), {});
    for (auto& k : s.k) {
      expect(in.get<int32_t>("a K type") == 0, "K is not F32 (type 0)");
      expect(in.get<uint64_t>("a K row size") == uint64_t(width) * 4, "K row size");
      k.assign(size_t(cells) * size_t(width), 0.0f);
      in.take(k.data(), k.size() * 4, "K");
    }
    s.v.assign(size_t(layers), {});
    read_v(in, v_trans, cells, width, s);
  }
  expect(in.done(), "bytes left after the last stream");
  return s;
}

void unpermute_heads(std::span<const float> stored, int kv_heads, int head_dim,
                     std::span<float> out) {
  const int half = head_dim / 2;
  for (int h = 0; h < kv_heads; ++h) {
    const size_t base = size_t(h) * size_t(head_dim);
    for (int i = 0; i < half; ++i) {
      for (int j = 0; j < 2; ++j)
        out[base + size_t(j * half + i)] = stored[base + size_t(2 * i + j)];
    }
  }
}

}  // namespace kvcheck::llama_native
