#include "engine/cuda/device.h"

#include <sstream>

#include "engine/engine.h"

namespace kvcheck::cuda {

void throw_cuda_error(cudaError_t error, const char* what, const char* file, int line) {
  std::ostringstream out;
  out << "cuda: " << what << " failed at " << file << ":" << line << ": " << cudaGetErrorName(error)
      << " (" << cudaGetErrorString(error) << ")";
  throw EngineError(EngineError::Kind::kDevice, out.str());
}

void check_launch(const char* kernel_name, const char* file, int line) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    throw_cuda_error(error, (std::string("launch of ") + kernel_name).c_str(), file, line);
  }
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = other.ptr_, bytes_ = other.bytes_;
    other.ptr_ = nullptr, other.bytes_ = 0;
  }
  return *this;
}

void DeviceBuffer::allocate(size_t bytes, const char* what) {
  release();
  if (bytes == 0) return;
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // an allocation failure is not sticky; clear it
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    std::ostringstream out;
    out << "cuda: out of device memory: " << what << " requested " << bytes << " bytes ("
        << free_bytes << " of " << total_bytes << " bytes free)";
    throw EngineError(EngineError::Kind::kDevice, out.str());
  }
  if (error != cudaSuccess) {
    throw_cuda_error(error, (std::string("cudaMalloc for ") + what).c_str(), __FILE__, __LINE__);
  }
  ptr_ = ptr;
  bytes_ = bytes;
}

void DeviceBuffer::release() {
  // Freeing never throws: a destructor may run while another error unwinds.
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

bool device_present() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace kvcheck::cuda
