// Host-side CUDA plumbing of the CUDA engine: every runtime call checked with
// its file and line, and device allocations whose failure is a clear
// EngineError (kDevice) naming the bytes requested. Plain C++: included by
// the g++-compiled engine and by the .cu kernels alike.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace kvcheck::cuda {

// Throws EngineError(kDevice) "cuda: <what> failed at <file>:<line>: <error>".
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* what, const char* file, int line);

// Checks one CUDA runtime call; a failure becomes an EngineError with the
// call's text, file and line.
#define KVCHECK_CUDA_CHECK(call)                                                          \
  do {                                                                                    \
    const cudaError_t kvcheck_cuda_status_ = (call);                                      \
    if (kvcheck_cuda_status_ != cudaSuccess) {                                            \
      ::kvcheck::cuda::throw_cuda_error(kvcheck_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

// Checks that the kernel launch just issued was accepted (bad configuration,
// no device). Errors inside the kernel surface at the next synchronizing call.
#define KVCHECK_CUDA_CHECK_LAUNCH(kernel_name) \
  ::kvcheck::cuda::check_launch(kernel_name, __FILE__, __LINE__)
void check_launch(const char* kernel_name, const char* file, int line);

// One device allocation, owned. Out of memory throws EngineError(kDevice)
// naming `what`, the bytes requested and the device's free/total bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const char* what) { allocate(bytes, what); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
    other.ptr_ = nullptr, other.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  // Replaces the contents with `bytes` of fresh, uninitialized memory.
  void allocate(size_t bytes, const char* what);
  // Grows to at least `bytes` (contents lost when it grows); never shrinks.
  void reserve(size_t bytes, const char* what) {
    if (bytes > bytes_) allocate(bytes, what);
  }
  void release();

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// True when the CUDA runtime sees at least one device.
bool device_present();

}  // namespace kvcheck::cuda
