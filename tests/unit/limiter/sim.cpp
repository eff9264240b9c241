#include "sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace gpuslice::limiter::sim {
namespace {

struct CurrentActor {
  World* world = nullptr;
  int ctx = -1;
};
thread_local CurrentActor t_current;

// Work below this is rounding noise of the processor-sharing arithmetic.
constexpr double kEpsilonNs = 1e-6;

CUresult sim_ctx_synchronize() {
  World::current()->synchronize();
  return CUDA_SUCCESS;
}

CUresult sim_stream_synchronize(CUstream) {
  World::current()->synchronize();
  return CUDA_SUCCESS;
}

int event_id(CUevent event) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(event)) - 1; }

CUresult sim_event_create(CUevent* event) {
  *event = reinterpret_cast<CUevent>(static_cast<std::uintptr_t>(World::current()->create_event() + 1));
  return CUDA_SUCCESS;
}

CUresult sim_event_record(CUevent event, CUstream) {
  World* world = World::current();
  if (world->event_record_host_ns != 0) world->sleep(world->event_record_host_ns);
  world->record_event(event_id(event));
  return CUDA_SUCCESS;
}

CUresult sim_event_query(CUevent event) {
  std::uint64_t at = 0;
  return World::current()->event_time(event_id(event), &at) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult sim_event_synchronize(CUevent event) {
  std::uint64_t at = 0;
  while (!World::current()->event_time(event_id(event), &at)) World::current()->sleep(20'000);
  return CUDA_SUCCESS;
}

CUresult sim_ctx_id(std::uint64_t* id) {
  *id = 1;  // one context per simulated process
  return CUDA_SUCCESS;
}

CUresult sim_stream_query(CUstream) {
  return World::current()->queue_empty() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult sim_event_elapsed_ns(CUevent start, CUevent end, std::uint64_t* ns) {
  std::uint64_t from = 0;
  std::uint64_t to = 0;
  if (!World::current()->event_time(event_id(start), &from) ||
      !World::current()->event_time(event_id(end), &to)) {
    return CUDA_ERROR_NOT_READY;
  }
  *ns = to > from ? to - from : 0;
  return CUDA_SUCCESS;
}

}  // namespace

World::World() : World(Options{}) {}

World::World(const Options& options) : options_(options) {
  // The same suites on a time-slicing device (a second ctest run of them sets it).
  if (const char* text = std::getenv("GPUSLICE_SIM_TIMESLICE_NS")) {
    char* end = nullptr;
    timeslice_ns = std::strtoull(text, &end, 10);
    if (end == text || *end != '\0') {
      std::fprintf(stderr, "sim: GPUSLICE_SIM_TIMESLICE_NS='%s' is not a number of nanoseconds\n", text);
      std::abort();
    }
  }
}

World::~World() {
  for (auto& actor : actors_) {
    if (actor->thread.joinable()) actor->thread.join();
  }
}

World* World::current() { return t_current.world; }

int World::add_context(int container) {
  contexts_.push_back(Context{});
  contexts_.back().container = container;
  if (static_cast<std::size_t>(container) >= busy_by_container_.size()) {
    busy_by_container_.resize(static_cast<std::size_t>(container) + 1);
  }
  return static_cast<int>(contexts_.size()) - 1;
}

void World::add_actor(int ctx, std::function<void()> body) {
  auto actor = std::make_unique<Actor>();
  actor->id = static_cast<int>(actors_.size());
  actor->ctx = ctx;
  actor->body = std::move(body);
  actors_.push_back(std::move(actor));
}

void World::run() {
  for (auto& actor : actors_) {
    Actor* raw = actor.get();
    actor->thread = std::thread([this, raw] { actor_main(raw); });
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (!dispatch(lock)) finished_ = true;
  main_cv_.wait(lock, [this] { return finished_; });
  lock.unlock();
  for (auto& actor : actors_) actor->thread.join();
}

void World::actor_main(Actor* actor) {
  t_current.world = this;
  t_current.ctx = actor->ctx;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    actor->cv.wait(lock, [actor] { return actor->state == State::Running; });
  }
  actor->body();
  std::unique_lock<std::mutex> lock(mutex_);
  actor->state = State::Done;
  if (!dispatch(lock)) {
    finished_ = true;
    main_cv_.notify_all();
  }
}

bool World::runnable(const Actor& actor) const {
  const Context& ctx = contexts_[static_cast<std::size_t>(actor.ctx)];
  switch (actor.state) {
    case State::Ready:
      return true;
    case State::Sleeping:
      return actor.wake_ns <= now_;
    case State::WaitEmpty:
      return ctx.remaining.empty();
    case State::WaitSpace:
      return ctx.remaining.size() < options_.max_queue;
    case State::Running:
    case State::Done:
      return false;
  }
  return false;
}

World::Actor* World::running() {
  for (auto& actor : actors_) {
    if (actor->state == State::Running) return actor.get();
  }
  std::fprintf(stderr, "sim: World called from outside a running actor\n");
  std::abort();
}

World::Actor* World::pick_runnable() {
  for (auto& actor : actors_) {
    if (runnable(*actor)) return actor.get();
  }
  return nullptr;
}

double World::speed() const {
  if (clock_model.flat_mhz == 0) return 1.0;
  return std::pow(busy_clock_mhz() / clock_model.flat_mhz, clock_model.exponent);
}

double World::busy_clock_mhz() const {
  const double flat = clock_model.flat_mhz;
  return flat + (static_cast<double>(clock_model.idle_mhz) - flat) * (1.0 - load_) * clock_model.busy_rise;
}

std::uint32_t World::sm_clock_mhz() const {
  if (clock_model.flat_mhz == 0) return 0;
  if (clock_model.idle_reads_max &&
      std::all_of(contexts_.begin(), contexts_.end(), [](const Context& c) { return c.remaining.empty(); }))
    return clock_model.idle_mhz;
  return static_cast<std::uint32_t>(busy_clock_mhz() + 0.5);
}

void World::age_load(std::uint64_t step, bool busy) {
  if (clock_model.flat_mhz == 0) return;
  const double keep = std::exp(-static_cast<double>(step) / static_cast<double>(clock_model.tau_ns));
  load_ = load_ * keep + (busy ? 1.0 - keep : 0.0);
}

double World::device_busy(std::uint64_t from, std::uint64_t to) const {
  double busy = 0;
  for (std::size_t c = 0; c < busy_by_container_.size(); ++c)
    busy += occupancy(static_cast<int>(c), from, to);
  return busy;
}

double World::nvml_utilization(std::uint64_t period_ns) const {
  const std::uint64_t end = now_ / period_ns * period_ns;
  return end < period_ns ? 0.0 : device_busy(end - period_ns, end);
}

void World::run_head(Context& ctx, std::uint64_t step, double share) {
  add_busy(busy_by_container_[static_cast<std::size_t>(ctx.container)], now_, now_ + step, share);
  ctx.remaining.front() -= static_cast<double>(step) * share * speed();
  if (ctx.remaining.front() > kEpsilonNs) return;
  add_busy(ctx.work_by_bucket, now_ + step - 1, now_ + step, static_cast<double>(ctx.nominal.front()));
  for (const int event : ctx.markers.front()) event_done_[static_cast<std::size_t>(event)] = now_ + step + 1;
  ctx.remaining.pop_front();
  ctx.nominal.pop_front();
  ctx.markers.pop_front();
}

World::Turn World::turn() const {
  constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
  const auto count = static_cast<int>(contexts_.size());
  auto has_work = [this](int c) { return !contexts_[static_cast<std::size_t>(c)].remaining.empty(); };
  auto others = [&](int self) {
    int n = 0;
    for (int c = 0; c < count; ++c) n += c != self && has_work(c) ? 1 : 0;
    return n;
  };
  if (holder_ >= 0 && has_work(holder_)) {
    if (others(holder_) == 0) return {holder_, kNever};
    if (now_ < slice_end_) return {holder_, slice_end_};
    // Its slice is over: the next context with work, in turn; the holder still waits.
    for (int i = 1; i < count; ++i) {
      const int c = (holder_ + i) % count;
      if (has_work(c)) return {c, now_ + timeslice_ns};
    }
  }
  const int start = holder_ < 0 ? 0 : holder_ + 1;
  for (int i = 0; i < count; ++i) {
    const int c = (start + i) % count;
    if (has_work(c)) return {c, others(c) == 0 ? kNever : now_ + timeslice_ns};
  }
  return {};
}

std::uint64_t World::turn_step(const Turn& t) const {
  const double front = contexts_[static_cast<std::size_t>(t.ctx)].remaining.front() / speed();
  const auto done = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(front)));
  return std::min(done, t.until > now_ ? t.until - now_ : std::uint64_t{1});
}

bool World::next_device_event(std::uint64_t* at) const {
  if (timeslice_ns != 0) {
    const Turn t = turn();
    if (t.ctx < 0) return false;
    *at = now_ + turn_step(t);
    return true;
  }
  double shortest = std::numeric_limits<double>::infinity();
  int active = 0;
  for (const Context& ctx : contexts_) {
    if (ctx.remaining.empty()) continue;
    ++active;
    shortest = std::min(shortest, ctx.remaining.front());
  }
  if (active == 0) return false;
  *at = now_ + std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(shortest * active / speed())));
  return true;
}

bool World::dispatch(std::unique_lock<std::mutex>&) {
  for (;;) {
    if (Actor* next = pick_runnable()) {
      next->state = State::Running;
      next->cv.notify_one();
      return true;
    }
    bool any_waiting = false;
    std::uint64_t next_time = std::numeric_limits<std::uint64_t>::max();
    for (auto& actor : actors_) {
      if (actor->state == State::Done) continue;
      any_waiting = true;
      if (actor->state == State::Sleeping) next_time = std::min(next_time, actor->wake_ns);
    }
    if (!any_waiting) return false;
    std::uint64_t device_time = 0;
    if (next_device_event(&device_time)) next_time = std::min(next_time, device_time);
    if (next_time == std::numeric_limits<std::uint64_t>::max()) {
      std::fprintf(stderr, "sim: every actor waits and nothing is pending: deadlock\n");
      std::abort();
    }
    advance_device(next_time);
  }
}

void World::block(std::unique_lock<std::mutex>& lock, Actor* self) {
  dispatch(lock);
  self->cv.wait(lock, [self] { return self->state == State::Running; });
}

void World::add_busy(std::vector<double>& buckets, std::uint64_t from, std::uint64_t to, double share) {
  while (from < to) {
    const std::uint64_t bucket = from / options_.bucket_ns;
    const std::uint64_t bucket_end = (bucket + 1) * options_.bucket_ns;
    const std::uint64_t until = std::min(to, bucket_end);
    if (buckets.size() <= bucket) buckets.resize(bucket + 1, 0.0);
    buckets[bucket] += share * static_cast<double>(until - from);
    from = until;
  }
}

void World::advance_sliced(std::uint64_t to) {
  while (now_ < to) {
    const Turn t = turn();
    if (t.ctx < 0) {
      age_load(to - now_, false);
      now_ = to;
      return;
    }
    const bool alone = t.until == std::numeric_limits<std::uint64_t>::max();
    holder_ = t.ctx;
    if (!alone) slice_end_ = t.until;
    const std::uint64_t step = std::min(turn_step(t), to - now_);
    run_head(contexts_[static_cast<std::size_t>(t.ctx)], step, 1.0);
    age_load(step, true);
    now_ += step;
    // Running alone, its slice starts over: work arriving now waits for at most one slice.
    if (alone) slice_end_ = now_ + timeslice_ns;
  }
}

void World::advance_device(std::uint64_t to) {
  if (timeslice_ns != 0) return advance_sliced(to);
  while (now_ < to) {
    int active = 0;
    double shortest = std::numeric_limits<double>::infinity();
    for (const Context& ctx : contexts_) {
      if (ctx.remaining.empty()) continue;
      ++active;
      shortest = std::min(shortest, ctx.remaining.front());
    }
    if (active == 0) {
      age_load(to - now_, false);
      now_ = to;
      return;
    }
    const auto until_completion =
        std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(shortest * active / speed())));
    const std::uint64_t step = std::min(until_completion, to - now_);
    const double share = 1.0 / active;
    for (Context& ctx : contexts_) {
      if (!ctx.remaining.empty()) run_head(ctx, step, share);
    }
    age_load(step, true);
    now_ += step;
  }
}

void World::sleep(std::uint64_t ns) {
  std::unique_lock<std::mutex> lock(mutex_);
  Actor* self = running();
  self->state = State::Sleeping;
  self->wake_ns = now_ + ns;
  block(lock, self);
}

void World::launch(std::uint64_t duration_ns) {
  if (launch_host_ns != 0) sleep(launch_host_ns);
  std::unique_lock<std::mutex> lock(mutex_);
  Context& ctx = contexts_[static_cast<std::size_t>(t_current.ctx)];
  if (ctx.remaining.size() >= options_.max_queue) {
    Actor* self = running();
    self->state = State::WaitSpace;
    block(lock, self);
  }
  ctx.remaining.push_back(static_cast<double>(duration_ns));
  ctx.nominal.push_back(duration_ns);
  ctx.markers.emplace_back();
}

bool World::queue_empty() const {
  std::unique_lock<std::mutex> lock(mutex_);
  return contexts_[static_cast<std::size_t>(t_current.ctx)].remaining.empty();
}

int World::create_event() {
  std::unique_lock<std::mutex> lock(mutex_);
  event_done_.push_back(0);
  return static_cast<int>(event_done_.size()) - 1;
}

void World::record_event(int event) {
  std::unique_lock<std::mutex> lock(mutex_);
  Context& ctx = contexts_[static_cast<std::size_t>(t_current.ctx)];
  auto& done = event_done_.at(static_cast<std::size_t>(event));
  if (ctx.remaining.empty()) {
    done = now_ + 1;
  } else {
    done = 0;
    ctx.markers.back().push_back(event);
  }
}

bool World::event_time(int event, std::uint64_t* at) const {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::uint64_t done = event_done_.at(static_cast<std::size_t>(event));
  if (done == 0) return false;
  *at = done - 1;
  return true;
}

void World::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  Context& ctx = contexts_[static_cast<std::size_t>(t_current.ctx)];
  if (ctx.remaining.empty()) return;
  Actor* self = running();
  self->state = State::WaitEmpty;
  block(lock, self);
}

double World::occupancy(int container, std::uint64_t from, std::uint64_t to) const {
  const auto& buckets = busy_by_container_[static_cast<std::size_t>(container)];
  double busy = 0;
  for (std::uint64_t b = from / options_.bucket_ns; b < to / options_.bucket_ns && b < buckets.size(); ++b) {
    busy += buckets[b];
  }
  return busy / static_cast<double>(to - from);
}

double World::work_done(int ctx, std::uint64_t from, std::uint64_t to) const {
  const auto& buckets = contexts_[static_cast<std::size_t>(ctx)].work_by_bucket;
  double work = 0;
  for (std::uint64_t b = from / options_.bucket_ns; b < to / options_.bucket_ns && b < buckets.size(); ++b) {
    work += buckets[b];
  }
  return work;
}

DriverOps sim_driver_ops() {
  DriverOps ops;
  ops.ctx_synchronize = &sim_ctx_synchronize;
  ops.stream_synchronize = &sim_stream_synchronize;
  ops.event_create = &sim_event_create;
  ops.event_record = &sim_event_record;
  ops.event_query = &sim_event_query;
  ops.event_elapsed_ns = &sim_event_elapsed_ns;
  ops.stream_query = &sim_stream_query;
  return ops;
}

DriverOps sim_driver_ops_pipelined() {
  DriverOps ops = sim_driver_ops();
  ops.ctx_id = &sim_ctx_id;
  ops.event_synchronize = &sim_event_synchronize;
  return ops;
}

}  // namespace gpuslice::limiter::sim
