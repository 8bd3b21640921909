// The planned arena's records and its plans computed on a worker thread (planned_parts.hpp).
#include "planned_parts.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "modelmem/alloc/planned_allocator.hpp"

namespace modelmem::alloc {
namespace {
std::atomic<void (*)()> g_planner_thread_hook{nullptr};
}  // namespace

void set_planner_thread_hook(void (*hook)()) noexcept {
  g_planner_thread_hook.store(hook, std::memory_order_release);
}

namespace detail {

plan::Problem problem_of_step(const std::vector<LogEntry>& log, std::size_t alignment,
                              std::vector<std::size_t>& index_of) {
  plan::Problem problem;
  problem.name = "planned step";
  for (std::size_t i = 0; i < log.size(); ++i) {
    const LogEntry& e = log[i];
    if (e.free_t < 0) continue;  // outlives the step: kept out of the plan
    plan::Buffer b;
    b.id = std::to_string(i);
    b.size = e.size;
    b.start = e.alloc_t;
    b.end = e.free_t;
    b.alignment = alignment;
    problem.buffers.push_back(std::move(b));
    index_of.push_back(i);
  }
  return problem;
}

std::size_t step_peak(const std::vector<LogEntry>& log, std::size_t& outliving) {
  std::vector<std::pair<plan::Time, std::ptrdiff_t>> events;
  outliving = 0;
  for (const LogEntry& e : log) {
    events.emplace_back(e.alloc_t, static_cast<std::ptrdiff_t>(e.size));
    if (e.free_t >= 0)
      events.emplace_back(e.free_t, -static_cast<std::ptrdiff_t>(e.size));
    else
      outliving += e.size;
  }
  std::sort(events.begin(), events.end());
  std::ptrdiff_t live_now = 0, peak = 0;
  for (const auto& [t, d] : events) peak = std::max(peak, live_now += d);
  return static_cast<std::size_t>(peak);
}

std::shared_ptr<PlanJob> PlanJob::start(plan::Problem problem, Planner planner) {
  auto job = std::make_shared<PlanJob>();
  job->problem_ = std::move(problem);
  job->planner_ = std::move(planner);
  job->pid_ = static_cast<int>(::getpid());
  auto work = [job] {
    std::optional<plan::Plan> result;
    try {
      result = job->planner_(job->problem_);
    } catch (const std::exception&) {
      result.reset();  // no plan: the step stays with the fallback
    }
    std::lock_guard lock(job->mu_);
    job->result_ = std::move(result);
    job->done_ = true;
    job->cv_.notify_all();
  };
  try {
    std::thread([work] {
      if (auto hook = g_planner_thread_hook.load(std::memory_order_acquire)) hook();
      work();
    }).detach();
  } catch (const std::system_error&) {
    work();  // no thread to be had (a limit on threads): planned here, past the limit
  }
  return job;
}

bool PlanJob::wait_for(std::chrono::duration<double> budget) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, budget, [this] { return done_; });
}

void PlanJob::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
}

bool PlanJob::ready() {
  std::lock_guard lock(mu_);
  return done_;
}

std::optional<plan::Plan> PlanJob::take() {
  std::lock_guard lock(mu_);
  return std::move(result_);
}

}  // namespace detail
}  // namespace modelmem::alloc
