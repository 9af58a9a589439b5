// A crew of threads made ahead of the work they will run. A pipeline makes its fill threads'
// crew during its set-up, so that the fill starts with every thread already running: made when
// the fill started, the 16th thread began its first read about 1 ms after the first (3.6-3.9 ms
// for 8 bound threads; run W), each thread's creation waiting while the others fault in mapped
// pages.
//
// The constructor starts one thread, which starts the others, so the caller pays for one thread
// creation. Threads inherit the constructing thread's CPU binding.
//
// Ownership: the crew owns its threads; the destructor stops and joins them (a Run in progress
// finishes first: call it only from the thread that runs Run).
// Failure: a thread the OS refuses is no error of the constructor; Run reports it (below).
// Threading: construct, Run and destroy from one thread. The crew's threads run fn(t) with the
// t of their place in the crew; they are idle between runs, waiting on a futex.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hoist/status.h"

namespace hoist::transport {

class Crew {
 public:
  explicit Crew(int threads);
  ~Crew();
  Crew(const Crew&) = delete;
  Crew& operator=(const Crew&) = delete;

  int size() const { return size_; }

  // Has every thread of the crew that started run fn(t) once (t in [0, started)), and returns
  // when all of them have returned. Returns ResourceExhausted, naming the first thread that could
  // not start, if fewer than size() threads started; fn still ran on those that did (none when
  // even the first could not start). Call on_refused, if given, before fn runs anywhere.
  Status Run(const std::function<void(int)>& fn,
             const std::function<void(Status)>& on_refused = nullptr);

 private:
  void Launch();  // thread 0: starts threads 1.., then serves
  void Serve(int t);
  void WaitLaunched();

  const int size_;
  std::thread first_;
  std::vector<std::thread> rest_;  // written by thread 0 before launched_ turns true

  std::atomic<int> launched_{0};  // 1 once thread 0 has started every thread it could
  int started_ = 0;               // written before launched_ turns true
  std::string refused_;           // likewise

  const std::function<void(int)>* job_ = nullptr;  // written before generation_ moves
  std::atomic<int> generation_{0};                 // each Run and the stop move it
  std::atomic<int> busy_{0};                       // threads still in this run's fn
  bool stop_ = false;                              // written before generation_ moves
};

}  // namespace hoist::transport
