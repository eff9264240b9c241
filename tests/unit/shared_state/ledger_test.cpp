// Ledger behaviour within one process. Each Ledger instance opens its own file description, so
// several instances in one test stand for several processes of a container.
#include "shared_state/ledger.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "shared_state/layout.h"
#include "test_util.h"

namespace gpuslice::shm {
namespace {

using testing::kTotal;
using testing::kUuid;
using testing::TempDir;

std::unique_ptr<Ledger> open_ledger(const std::string& path, Ledger::Mode mode) {
  auto opened = Ledger::open(path, mode);
  EXPECT_TRUE(opened.ok()) << opened.error();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

std::unique_ptr<Ledger> open_process(const std::string& path) {
  auto ledger = open_ledger(path, Ledger::Mode::Process);
  if (ledger) {
    auto registered = ledger->register_process();
    EXPECT_TRUE(registered.ok()) << registered.error();
  }
  return ledger;
}

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("state");
    a_ = open_process(path_);
    ASSERT_NE(a_, nullptr);
    auto dev = a_->attach_device(kUuid, 0, kTotal, 100, kNoComputeLimit);
    ASSERT_TRUE(dev.ok()) << dev.error();
    dev_ = dev.value();
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Ledger> a_;
  int dev_ = -1;
};

TEST_F(LedgerTest, AttachFindsExistingRecordAndKeepsItsLimits) {
  EXPECT_EQ(dev_, 0);
  auto again = a_->attach_device("gpu-11111111-2222-3333-4444-555555555555", 3, kTotal, 999, 50);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), dev_);
  EXPECT_EQ(a_->quota(dev_), 100u);
  EXPECT_EQ(a_->compute_limit(dev_), kNoComputeLimit);
  auto other = a_->attach_device("GPU-other", 1, kTotal, kUnlimited, 30);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other.value(), 1);
  EXPECT_EQ(a_->compute_limit(1), 30u);
  EXPECT_EQ(a_->find_device("GPU-OTHER"), 1);
  EXPECT_EQ(a_->find_device("GPU-none"), -1);
  EXPECT_EQ(a_->device_count(), 2);
}

TEST_F(LedgerTest, AttachRejectsBadInputAndAFullTable) {
  EXPECT_FALSE(a_->attach_device("", 0, kTotal, 1, 0).ok());
  EXPECT_FALSE(a_->attach_device(std::string(200, 'u'), 0, kTotal, 1, 0).ok());
  EXPECT_FALSE(a_->attach_device("GPU-x", 0, kTotal, 1, 101).ok());
  for (std::uint32_t i = 1; i < layout::kMaxDeviceRecords; ++i) {
    ASSERT_TRUE(a_->attach_device("GPU-" + std::to_string(i), static_cast<int>(i), kTotal, 1, 0).ok());
  }
  auto full = a_->attach_device("GPU-one-too-many", 0, kTotal, 1, 0);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().find(path_), std::string::npos) << full.error();
}

TEST_F(LedgerTest, ReservesUpToTheQuotaAndNoFurther) {
  EXPECT_TRUE(a_->try_reserve(dev_, 60));
  EXPECT_TRUE(a_->try_reserve(dev_, 40));
  EXPECT_FALSE(a_->try_reserve(dev_, 1));
  EXPECT_EQ(a_->used(dev_), 100u);
  a_->release(dev_, 50);
  EXPECT_EQ(a_->used(dev_), 50u);
  EXPECT_FALSE(a_->try_reserve(dev_, 51));
  EXPECT_TRUE(a_->try_reserve(dev_, 50));
  EXPECT_EQ(a_->used_by_self(dev_), 100u);
  EXPECT_TRUE(a_->try_reserve(dev_, 0));
}

TEST_F(LedgerTest, ARequestLargerThanTheQuotaFailsWithoutCharging) {
  EXPECT_FALSE(a_->try_reserve(dev_, ~0ULL));
  EXPECT_FALSE(a_->try_reserve(dev_, 101));
  EXPECT_EQ(a_->used(dev_), 0u);
  EXPECT_TRUE(a_->try_reserve(dev_, 100));
}

TEST_F(LedgerTest, WhatTheDriverHoldsIsChargedPastTheQuotaAndRefusesEveryoneUntilBelow) {
  auto b = open_process(path_);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(a_->try_reserve(dev_, 90));
  a_->charge_held(dev_, 30);  // the driver's figure showed 30 more than the books
  EXPECT_EQ(a_->used(dev_), 120u);
  EXPECT_FALSE(b->try_reserve(dev_, 1));
  a_->release(dev_, 30);
  EXPECT_TRUE(b->try_reserve(dev_, 10));
  EXPECT_EQ(b->used(dev_), 100u);
}

TEST_F(LedgerTest, TheContextFootprintKeepsTheLargestAnyProcessMeasured) {
  auto b = open_process(path_);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->context_footprint(dev_), 0u);
  a_->note_context_footprint(dev_, 40);
  b->note_context_footprint(dev_, 30);
  EXPECT_EQ(b->context_footprint(dev_), 40u);
  EXPECT_EQ(a_->context_footprint(dev_), 40u);
}

TEST_F(LedgerTest, ProcessesShareOneQuota) {
  auto b = open_process(path_);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b->slot_index(), a_->slot_index());
  ASSERT_TRUE(a_->try_reserve(dev_, 70));
  EXPECT_FALSE(b->try_reserve(dev_, 40));
  EXPECT_TRUE(b->try_reserve(dev_, 30));
  EXPECT_EQ(b->used(dev_), 100u);
  EXPECT_EQ(b->used_by_self(dev_), 30u);
  EXPECT_EQ(a_->used_by_self(dev_), 70u);
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  EXPECT_EQ(observer->used(dev_), 100u);
}

TEST_F(LedgerTest, LiveQuotaChangeAppliesToTheNextReservation) {
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  ASSERT_TRUE(a_->try_reserve(dev_, 80));
  observer->set_quota(dev_, 50);
  EXPECT_EQ(a_->quota(dev_), 50u);
  EXPECT_FALSE(a_->try_reserve(dev_, 1));
  EXPECT_EQ(a_->used(dev_), 80u) << "lowering the quota must not take memory away";
  observer->set_quota(dev_, 200);
  EXPECT_TRUE(a_->try_reserve(dev_, 120));
  EXPECT_FALSE(a_->try_reserve(dev_, 1));
  observer->set_quota(dev_, kUnlimited);
  EXPECT_TRUE(a_->try_reserve(dev_, 1ULL << 40));
  EXPECT_EQ(observer->used(dev_), 200u + (1ULL << 40));
}

TEST_F(LedgerTest, TheGuaranteeIsKeptBesideTheLimitRequestCappedAndNeverAboveTheQuota) {
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  EXPECT_EQ(a_->guarantee(dev_), 0u) << "none until asked";
  a_->set_guarantee(dev_, 60);
  EXPECT_EQ(a_->guarantee(dev_), 60u);
  EXPECT_EQ(observer->guarantee(dev_), 60u) << "another process reads the same record";
  EXPECT_EQ(observer->requested(dev_).guarantee, 60u);
  a_->set_caps(dev_, {kUnlimited, kNoComputeLimit, 40});
  EXPECT_EQ(a_->guarantee(dev_), 40u) << "the file's cap holds the request";
  EXPECT_EQ(observer->caps(dev_).guarantee, 40u);
  EXPECT_EQ(a_->requested(dev_).guarantee, 60u) << "request and cap are kept apart";
  a_->set_caps(dev_, {30, kNoComputeLimit, 40});
  EXPECT_EQ(a_->guarantee(dev_), 30u) << "never above the quota in force";
  a_->set_caps(dev_, {});
  EXPECT_EQ(a_->guarantee(dev_), 60u) << "lifting the cap restores the request";
  a_->set_guarantee(dev_, 0);
  observer->set_caps(dev_, {kUnlimited, kNoComputeLimit, 20});
  EXPECT_EQ(a_->guarantee(dev_), 20u) << "no request: the operator's guarantee";
  observer->set_guarantee(dev_, 10);
  EXPECT_EQ(a_->guarantee(dev_), 10u);
  Snapshot snap = observer->snapshot();
  ASSERT_EQ(snap.devices.size(), 1u);
  EXPECT_EQ(snap.devices[0].guarantee, 10u);
  EXPECT_EQ(snap.devices[0].requested.guarantee, 10u);
  EXPECT_EQ(snap.devices[0].cap.guarantee, 20u);
  // Enforcement is unchanged: the quota alone decides.
  EXPECT_TRUE(a_->try_reserve(dev_, 100));
  EXPECT_FALSE(a_->try_reserve(dev_, 1));
}

TEST(EffectiveGuarantee, RequestCappedThenBoundedByTheQuota) {
  static_assert(effective_guarantee(0, 0, kUnlimited) == 0);
  static_assert(effective_guarantee(5, 0, kUnlimited) == 5);
  static_assert(effective_guarantee(0, 7, kUnlimited) == 7);
  static_assert(effective_guarantee(9, 7, kUnlimited) == 7);
  static_assert(effective_guarantee(3, 7, kUnlimited) == 3);
  static_assert(effective_guarantee(9, 7, 4) == 4);
  EXPECT_EQ(effective_guarantee(9, 0, 8), 8u);
}

TEST_F(LedgerTest, LiveComputeLimitIsVisibleEverywhere) {
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  const std::atomic<std::uint32_t>* source = a_->compute_limit_source(dev_);
  ASSERT_NE(source, nullptr);
  observer->set_compute_limit(dev_, 40);
  EXPECT_EQ(a_->compute_limit(dev_), 40u);
  EXPECT_EQ(source->load(), 40u);
  observer->set_compute_limit(dev_, 250);
  EXPECT_EQ(a_->compute_limit(dev_), 100u);
  EXPECT_EQ(a_->compute_limit_source(7), nullptr);
}

TEST_F(LedgerTest, PriorityIsUnsetUntilSetAndTheEnvironmentsInitialValueDoesNotUndoALiveChange) {
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  EXPECT_EQ(a_->priority(), std::nullopt);
  EXPECT_EQ(observer->priority(), std::nullopt);
  EXPECT_EQ(observer->snapshot().priority, std::nullopt);
  a_->init_priority(Priority::Low);  // GPUSLICE_PRIORITY=low at the first process's start
  EXPECT_EQ(observer->priority(), Priority::Low);
  observer->set_priority(Priority::High);  // gpuslice set --priority high
  EXPECT_EQ(a_->priority(), Priority::High);
  open_process(path_)->init_priority(Priority::Low);  // a process started later with the same environment
  EXPECT_EQ(a_->priority(), Priority::High);
  EXPECT_EQ(observer->snapshot().priority, Priority::High);
  ASSERT_NE(a_->priority_source(), nullptr);
  EXPECT_EQ(a_->priority_source()->load(), priority_value(Priority::High))
      << "the gate reads the value itself";
}

TEST_F(LedgerTest, HeldBackTimeOfAllProcessesAddsUpInTheSnapshot) {
  a_->add_held_back_ns(1500);
  open_process(path_)->add_held_back_ns(500);
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  observer->add_held_back_ns(1'000'000);  // an observer adds nothing
  EXPECT_EQ(observer->snapshot().held_back_ns, 2000U);
}

TEST_F(LedgerTest, SnapshotShowsDevicesProcessesAndCounters) {
  auto b = open_process(path_);
  ASSERT_TRUE(a_->try_reserve(dev_, 10));
  ASSERT_TRUE(b->try_reserve(dev_, 20));
  a_->add_busy_ns(dev_, 1234);
  a_->count_refusal(dev_);
  a_->count_refusal(dev_);
  a_->set_host_pid(4242);
  Snapshot snap = open_ledger(path_, Ledger::Mode::Observer)->snapshot();
  EXPECT_EQ(snap.path, path_);
  ASSERT_EQ(snap.devices.size(), 1u);
  EXPECT_EQ(snap.devices[0].uuid, kUuid);
  EXPECT_EQ(snap.devices[0].record, dev_);
  EXPECT_EQ(snap.devices[0].quota, 100u);
  EXPECT_EQ(snap.devices[0].used, 30u);
  EXPECT_EQ(snap.devices[0].total_bytes, kTotal);
  EXPECT_EQ(snap.devices[0].refused_allocations, 2u);
  ASSERT_EQ(snap.processes.size(), 2u);
  const ProcessRow& first =
      snap.processes[0].slot == a_->slot_index() ? snap.processes[0] : snap.processes[1];
  const ProcessRow& second = &first == &snap.processes[0] ? snap.processes[1] : snap.processes[0];
  EXPECT_EQ(first.pid, getpid());
  EXPECT_EQ(first.host_pid, 4242);
  EXPECT_FALSE(first.command.empty());
  ASSERT_EQ(first.used_by_device.size(), 1u);
  EXPECT_EQ(first.used_by_device[0], 10u);
  EXPECT_EQ(first.busy_ns_by_device[0], 1234u);
  EXPECT_EQ(second.used_by_device[0], 20u);
  EXPECT_EQ(second.busy_ns_by_device[0], 0u);
}

TEST_F(LedgerTest, ClosingAProcessReturnsItsBytesAndItsSlot) {
  auto b = open_process(path_);
  int b_slot = b->slot_index();
  ASSERT_TRUE(b->try_reserve(dev_, 90));
  b.reset();
  EXPECT_EQ(a_->used(dev_), 0u);
  auto c = open_process(path_);
  EXPECT_EQ(c->slot_index(), b_slot) << "a freed slot is reused, keeping the scan short";
  EXPECT_TRUE(c->try_reserve(dev_, 100));
}

TEST_F(LedgerTest, ReleasingMoreThanHeldOnlyReturnsWhatWasHeld) {
  auto b = open_process(path_);
  ASSERT_TRUE(a_->try_reserve(dev_, 30));
  ASSERT_TRUE(b->try_reserve(dev_, 30));
  b->release(dev_, 1000);
  EXPECT_EQ(a_->used(dev_), 30u);
  EXPECT_EQ(a_->used_by_self(dev_), 30u);
  EXPECT_TRUE(b->try_reserve(dev_, 70));
}

TEST_F(LedgerTest, ObserverHoldsNoSlot) {
  auto observer = open_ledger(path_, Ledger::Mode::Observer);
  EXPECT_FALSE(observer->register_process().ok());
  EXPECT_FALSE(observer->try_reserve(dev_, 1));
  EXPECT_EQ(observer->slot_index(), -1);
  EXPECT_EQ(observer->reap_dead(), 0) << "live processes are never reaped";
}

TEST_F(LedgerTest, UnknownDevicesAreRefusedAndReportNoQuota) {
  EXPECT_FALSE(a_->try_reserve(5, 1));
  EXPECT_FALSE(a_->try_reserve(-1, 1));
  EXPECT_EQ(a_->quota(99), 0u) << "an unknown device must never look unlimited";
  EXPECT_EQ(a_->used(5), 0u);
  EXPECT_EQ(a_->compute_state(5), nullptr);
  EXPECT_NE(a_->compute_state(dev_), nullptr);
}

TEST_F(LedgerTest, ProcessModeRegistersOnFirstReservation) {
  auto b = open_ledger(path_, Ledger::Mode::Process);
  EXPECT_EQ(b->slot_index(), -1);
  EXPECT_TRUE(b->try_reserve(dev_, 5));
  EXPECT_GE(b->slot_index(), 0);
  EXPECT_EQ(b->used_by_self(dev_), 5u);
}

// A creator that died with the pid this process now has left its temporary files: the creation
// takes the next free name instead of failing (and failing every CUDA call of the process).
TEST_F(LedgerTest, TemporaryNamesLeftByADeadCreatorWithOurPidDoNotBlockCreation) {
  const std::string fresh_path = dir_.file("fresh-state");
  for (int n = 0; n < 8; ++n) {
    const std::string left = fresh_path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(n);
    int fd = ::open(left.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0) << left;
    close(fd);
  }
  auto created = Ledger::open(fresh_path, Ledger::Mode::Process);
  ASSERT_TRUE(created.ok()) << created.error();
}

TEST_F(LedgerTest, TemporaryFilesOfDeadCreatorsAreRemovedAndFreshOnesKept) {
  std::string abandoned = path_ + ".tmp.4242.0";
  std::string fresh = path_ + ".tmp.4243.0";
  std::string unrelated = dir_.file("other.tmp.1.0");
  for (const std::string& f : {abandoned, fresh, unrelated}) {
    int fd = ::open(f.c_str(), O_CREAT | O_WRONLY, 0600);
    ASSERT_GE(fd, 0) << f;
    close(fd);
  }
  timespec old_times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, abandoned.c_str(), old_times, 0), 0);
  ASSERT_EQ(utimensat(AT_FDCWD, unrelated.c_str(), old_times, 0), 0);
  auto process = open_process(path_);
  ASSERT_NE(process, nullptr);
  struct stat st {};
  EXPECT_NE(stat(abandoned.c_str(), &st), 0) << "an abandoned temporary file stays";
  EXPECT_EQ(stat(fresh.c_str(), &st), 0) << "a creator may still be publishing this one";
  EXPECT_EQ(stat(unrelated.c_str(), &st), 0) << "not ours";
}

TEST_F(LedgerTest, ReadOnlyFileCanStillBeObserved) {
  ASSERT_TRUE(a_->try_reserve(dev_, 10));
  ASSERT_EQ(chmod(path_.c_str(), 0444), 0);
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  // Returns the number of failed checks (100 if the file could not even be observed).
  auto failed_checks = [this] {
    auto observer = Ledger::open(path_, Ledger::Mode::Observer);
    if (!observer.ok()) return 100;
    int failures = observer.value()->writable() ? 1 : 0;
    failures += observer.value()->used(dev_) == 10u ? 0 : 1;
    observer.value()->set_quota(dev_, 1);
    failures += observer.value()->quota(dev_) == 100u ? 0 : 1;
    failures += observer.value()->reap_dead() == 0 ? 0 : 1;
    failures += Ledger::open(path_, Ledger::Mode::Process).ok() ? 1 : 0;
    return failures;
  };
  if (geteuid() != 0) {
    EXPECT_EQ(failed_checks(), 0);
    return;
  }
  // Root ignores file permissions: run the checks as an unprivileged child.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(101);
    _exit(failed_checks());
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "number of failed checks (100, 101: setup failed)";
  EXPECT_EQ(a_->quota(dev_), 100u);
}

TEST(LedgerConcurrency, SimultaneousOpenersShareOneFileAndOneRecord) {
  TempDir dir;
  std::string path = dir.file("state");
  constexpr int kOpeners = 8;
  std::vector<std::unique_ptr<Ledger>> ledgers(kOpeners);
  std::vector<int> devices(kOpeners, -2);
  std::vector<std::string> errors(kOpeners);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kOpeners; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kOpeners) std::this_thread::yield();
      auto opened = Ledger::open(path, Ledger::Mode::Process);
      if (!opened.ok()) {
        errors[i] = opened.error();
        return;
      }
      ledgers[i] = std::move(opened).value();
      auto dev = ledgers[i]->attach_device(kUuid, 0, kTotal, 1000, 0);
      devices[i] = dev.ok() ? dev.value() : -3;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kOpeners; ++i) {
    ASSERT_NE(ledgers[i], nullptr) << "opener " << i << ": " << errors[i];
    EXPECT_EQ(devices[i], 0) << i;
  }
  EXPECT_EQ(ledgers[0]->device_count(), 1);
  // No temporary files are left behind by the losers of the creation race.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(LedgerConcurrency, ThreadsOfOneProcessAttachANewDeviceOnce) {
  // Threads share one file description, so the file lock alone would not order them.
  TempDir dir;
  auto ledger = open_process(dir.file("state"));
  constexpr int kThreads = 6;
  std::vector<int> devices(kThreads, -2);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int round = 0; round < 4; ++round) {
    std::string uuid = "GPU-round-" + std::to_string(round);
    threads.clear();
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        ready.fetch_add(1);
        while (ready.load() < kThreads * (round + 1)) std::this_thread::yield();
        auto dev = ledger->attach_device(uuid, round, kTotal, 10, 0);
        devices[i] = dev.ok() ? dev.value() : -3;
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kThreads; ++i) EXPECT_EQ(devices[i], round) << "round " << round << " thread " << i;
  }
  EXPECT_EQ(ledger->device_count(), 4);
}

TEST(LedgerConcurrency, ThreadsOfSeveralProcessesNeverExceedTheQuota) {
  TempDir dir;
  std::string path = dir.file("state");
  constexpr std::uint64_t kQuota = 1000;
  constexpr int kProcesses = 3, kThreads = 2, kOps = 4000;
  std::vector<std::unique_ptr<Ledger>> processes;
  for (int p = 0; p < kProcesses; ++p) processes.push_back(open_process(path));
  int dev = processes[0]->attach_device(kUuid, 0, kTotal, kQuota, 0).value();
  auto observer = open_ledger(path, Ledger::Mode::Observer);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> worst{0};
  std::thread sampler([&] {
    while (!done.load()) {
      std::uint64_t u = observer->used(dev);
      if (u > worst.load()) worst.store(u);
    }
  });
  std::vector<std::uint64_t> live(kProcesses * kThreads, 0);
  std::vector<std::thread> workers;
  for (int w = 0; w < kProcesses * kThreads; ++w) {
    workers.emplace_back([&, w] {
      Ledger& ledger = *processes[w / kThreads];
      std::mt19937 rng(static_cast<unsigned>(w) * 7919u);
      std::vector<std::uint64_t> held;
      for (int i = 0; i < kOps; ++i) {
        if (held.empty() || rng() % 2 == 0) {
          std::uint64_t size = 1 + rng() % 200;
          if (ledger.try_reserve(dev, size)) held.push_back(size);
        } else {
          std::size_t k = rng() % held.size();
          ledger.release(dev, held[k]);
          held[k] = held.back();
          held.pop_back();
        }
      }
      for (std::uint64_t h : held) live[w] += h;
    });
  }
  for (auto& t : workers) t.join();
  done.store(true);
  sampler.join();
  std::uint64_t expected = 0;
  for (std::uint64_t v : live) expected += v;
  EXPECT_LE(worst.load(), kQuota);
  EXPECT_EQ(observer->used(dev), expected);
}

// Threads of one process that each hold one small allocation at a time: a release must return
// exactly what it names even while other threads' reserve+release pairs land between its reads of
// the process's counters (an over-release guard that read them in the wrong order once clamped
// such releases and left bytes charged to a process that held nothing).
TEST(LedgerConcurrency, ReleasesUnderChurnReturnExactlyWhatWasReserved) {
  TempDir dir;
  std::string path = dir.file("state");
  auto process = open_process(path);
  int dev = process->attach_device(kUuid, 0, kTotal, kUnlimited, 0).value();
  constexpr int kThreads = 4, kOps = 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        std::uint64_t size = 1 + static_cast<std::uint64_t>((i * 7 + t) % 5);
        if (process->try_reserve(dev, size)) process->release(dev, size);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(process->used_by_self(dev), 0u);
  EXPECT_EQ(process->used(dev), 0u);
}

}  // namespace
}  // namespace gpuslice::shm
