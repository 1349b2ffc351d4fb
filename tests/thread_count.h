#pragma once
// Restores the process's compute thread count when a test ends, whatever the
// test set it to (sinkgraph::set_num_threads).
#include "sinkgraph/device.h"

namespace sgtest {

class ThreadCount {
 public:
  ThreadCount() : saved_(sinkgraph::num_threads()) {}
  ~ThreadCount() { sinkgraph::set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

}  // namespace sgtest
