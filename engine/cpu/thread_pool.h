// A fixed pool that runs one parallel loop at a time. The engine hands it
// disjoint output ranges only, never parts of a reduction, so results are the
// same bits for every thread count.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvcheck::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads - 1 workers; the caller is the last
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls task(i) for every i in [0, n), spread over the pool; returns when all are done.
  void run(size_t n, const std::function<void(size_t)>& task);

 private:
  void work(size_t worker);
  void drain();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t n_tasks_ = 0, next_task_ = 0, finished_ = 0;
  size_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace kvcheck::cpu
