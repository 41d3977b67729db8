#include "engine/cpu/thread_pool.h"

namespace kvcheck::cpu {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(size_t(i)); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run(size_t n, const std::function<void(size_t)>& task) {
  if (workers_.empty() || n <= 1) {
    for (size_t i = 0; i < n; ++i) task(i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    task_ = &task;
    n_tasks_ = n;
    next_task_ = 0;
    finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  drain();
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return finished_ == n_tasks_; });
  task_ = nullptr;
}

// Takes tasks until none are left; the caller thread and workers share it.
void ThreadPool::drain() {
  for (;;) {
    size_t i;
    const std::function<void(size_t)>* task;
    {
      std::lock_guard lock(mutex_);
      if (task_ == nullptr || next_task_ >= n_tasks_) return;
      i = next_task_++;
      task = task_;
    }
    (*task)(i);
    bool all_done;
    {
      std::lock_guard lock(mutex_);
      all_done = ++finished_ == n_tasks_;
    }
    if (all_done) done_.notify_all();
  }
}

void ThreadPool::work(size_t /*worker*/) {
  size_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    drain();
  }
}

}  // namespace kvcheck::cpu
