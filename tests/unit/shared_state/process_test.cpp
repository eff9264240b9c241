// Ledger behaviour across real processes: fork semantics, SIGKILL reaping, PID reuse and stale
// claims. Children report through pipes and leave with _exit; assertions stay in the parent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "common/clock.h"
#include "shared_state/layout.h"
#include "shared_state/ledger.h"
#include "shared_state/proc_identity.h"
#include "test_util.h"

namespace gpuslice::shm {
namespace {

using testing::RawMapping;
using testing::TempDir;
constexpr char kProcessUuid[] = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

// A pipe pair for talking to one child: values go child->parent, a byte parent->child.
struct Channel {
  int up[2] = {-1, -1};
  int down[2] = {-1, -1};
  Channel() {
    EXPECT_EQ(pipe(up), 0);
    EXPECT_EQ(pipe(down), 0);
  }
  ~Channel() {
    for (int fd : {up[0], up[1], down[0], down[1]})
      if (fd >= 0) close(fd);
  }
  // Child side.
  void send(long long value) const {
    char line[32];
    int n = std::snprintf(line, sizeof line, "%lld\n", value);
    ssize_t ignored = write(up[1], line, static_cast<std::size_t>(n));
    (void)ignored;
  }
  void wait_for_parent() const {
    char c;
    ssize_t ignored = read(down[0], &c, 1);
    (void)ignored;
  }
  // Parent side.
  long long receive() const {
    std::string line;
    char c;
    while (read(up[0], &c, 1) == 1 && c != '\n') line += c;
    return line.empty() ? -999 : std::stoll(line);
  }
  void release_child() const {
    ssize_t ignored = write(down[1], "x", 1);
    (void)ignored;
  }
};

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("state");
    auto opened = Ledger::open(path_, Ledger::Mode::Observer);
    ASSERT_FALSE(opened.ok());
    auto creator = Ledger::open(path_, Ledger::Mode::Process);
    ASSERT_TRUE(creator.ok()) << creator.error();
    auto dev = creator.value()->attach_device(kProcessUuid, 0, 1ULL << 34, 1ULL << 20, 0);
    ASSERT_TRUE(dev.ok());
    dev_ = dev.value();
    observer_ = std::move(Ledger::open(path_, Ledger::Mode::Observer)).value();
  }

  static int wait_exit(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  }

  TempDir dir_;
  std::string path_;
  int dev_ = -1;
  std::unique_ptr<Ledger> observer_;
};

TEST_F(ProcessTest, SigkilledProcessIsReapedAndItsBytesReturn) {
  Channel ch;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ledger = Ledger::open(path_, Ledger::Mode::Process);
    bool ok =
        ledger.ok() && ledger.value()->register_process().ok() && ledger.value()->try_reserve(dev_, 4096);
    ch.send(ok ? 1 : 0);
    for (;;) pause();
  }
  ASSERT_EQ(ch.receive(), 1);
  EXPECT_EQ(observer_->used(dev_), 4096u);
  EXPECT_EQ(observer_->reap_dead(), 0) << "a live process must not be reaped";
  ASSERT_EQ(observer_->snapshot().processes.size(), 1u);
  kill(child, SIGKILL);
  int status = wait_exit(child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(observer_->reap_dead(), 1);
  EXPECT_EQ(observer_->used(dev_), 0u);
  EXPECT_TRUE(observer_->snapshot().processes.empty());
  EXPECT_EQ(observer_->reap_dead(), 0) << "reaping is done once";
}

TEST_F(ProcessTest, RefusedReservationReapsTheDeadAndRetries) {
  Channel ch;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ledger = Ledger::open(path_, Ledger::Mode::Process);
    ch.send(ledger.ok() && ledger.value()->try_reserve(dev_, 1ULL << 20) ? 1 : 0);
    for (;;) pause();
  }
  ASSERT_EQ(ch.receive(), 1);
  kill(child, SIGKILL);
  wait_exit(child);
  auto survivor = std::move(Ledger::open(path_, Ledger::Mode::Process)).value();
  // The whole quota is still charged to the dead child until someone reaps: the refusal does.
  EXPECT_TRUE(survivor->try_reserve(dev_, 1ULL << 20));
  EXPECT_EQ(observer_->used(dev_), 1ULL << 20);
}

TEST_F(ProcessTest, PidReuseDoesNotMatter) {
  // A dead process whose pid now names a live process is still reaped...
  Channel ch;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto ledger = Ledger::open(path_, Ledger::Mode::Process);
    bool ok = ledger.ok() && ledger.value()->try_reserve(dev_, 100);
    ch.send(ok ? ledger.value()->slot_index() : -1);
    for (;;) pause();
  }
  long long dead_slot = ch.receive();
  ASSERT_GE(dead_slot, 0);
  kill(child, SIGKILL);
  wait_exit(child);
  RawMapping raw(path_);
  ASSERT_TRUE(raw.ok());
  raw.slot(static_cast<std::uint32_t>(dead_slot)).pid.store(getpid());
  raw.slot(static_cast<std::uint32_t>(dead_slot)).host_pid.store(1);

  // ...and a live process whose recorded pid exists nowhere (another PID namespace) is not.
  auto live = std::move(Ledger::open(path_, Ledger::Mode::Process)).value();
  ASSERT_TRUE(live->try_reserve(dev_, 50));
  raw.slot(static_cast<std::uint32_t>(live->slot_index())).pid.store(0x7ffffff0);

  EXPECT_EQ(observer_->reap_dead(), 1);
  EXPECT_EQ(observer_->used(dev_), 50u);
  ASSERT_EQ(observer_->snapshot().processes.size(), 1u);
  EXPECT_EQ(observer_->snapshot().processes[0].pid, 0x7ffffff0);
}

TEST_F(ProcessTest, ForkedChildGetsItsOwnSlotAndNeverTouchesTheParents) {
  auto parent = std::move(Ledger::open(path_, Ledger::Mode::Process)).value();
  ASSERT_TRUE(parent->register_process().ok());
  ASSERT_TRUE(parent->try_reserve(dev_, 100));
  int parent_slot = parent->slot_index();
  Channel ch;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // What the interposer's atfork handler does.
    bool registered = parent->register_process().ok();
    ch.send(registered ? 1 : 0);
    ch.send(parent->slot_index());
    ch.send(static_cast<long long>(parent->used_by_self(dev_)));
    parent->release(dev_, 100);  // the parent's allocation: not the child's to return
    ch.send(parent->try_reserve(dev_, 50) ? 1 : 0);
    ch.send(static_cast<long long>(parent->used_by_self(dev_)));
    ch.send(static_cast<long long>(parent->used(dev_)));
    ch.wait_for_parent();
    _exit(0);
  }
  EXPECT_EQ(ch.receive(), 1);
  long long child_slot = ch.receive();
  EXPECT_GE(child_slot, 0);
  EXPECT_NE(child_slot, parent_slot);
  EXPECT_EQ(ch.receive(), 0) << "the child starts with nothing charged";
  EXPECT_EQ(ch.receive(), 1);
  EXPECT_EQ(ch.receive(), 50);
  EXPECT_EQ(ch.receive(), 150);
  EXPECT_EQ(parent->used_by_self(dev_), 100u);
  Snapshot snap = observer_->snapshot();
  ASSERT_EQ(snap.processes.size(), 2u);
  for (const ProcessRow& row : snap.processes) {
    EXPECT_EQ(row.used_by_device[0], row.pid == getpid() ? 100u : 50u);
  }
  ch.release_child();
  ASSERT_EQ(wait_exit(child), 0);
  // The child closed its copy of the parent's file description: only the child is dead.
  EXPECT_EQ(observer_->reap_dead(), 1);
  EXPECT_EQ(observer_->used(dev_), 100u);
  EXPECT_EQ(parent->reap_dead(), 0);
  EXPECT_EQ(parent->used_by_self(dev_), 100u);
}

TEST_F(ProcessTest, ForkedChildRegistersItselfOnFirstUse) {
  auto parent = std::move(Ledger::open(path_, Ledger::Mode::Process)).value();
  ASSERT_TRUE(parent->try_reserve(dev_, 10));
  Channel ch;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // No register_process(): the first reservation claims a slot for the child.
    ch.send(parent->try_reserve(dev_, 20) ? 1 : 0);
    ch.send(parent->slot_index());
    ch.wait_for_parent();
    _exit(0);
  }
  EXPECT_EQ(ch.receive(), 1);
  EXPECT_NE(ch.receive(), parent->slot_index());
  EXPECT_EQ(parent->used_by_self(dev_), 10u);
  EXPECT_EQ(observer_->used(dev_), 30u);
  ch.release_child();
  wait_exit(child);
  EXPECT_EQ(observer_->reap_dead(), 1);
  EXPECT_EQ(observer_->used(dev_), 10u);
}

TEST_F(ProcessTest, ForkedChildDoesNotReapItsLiveParent) {
  auto parent = std::move(Ledger::open(path_, Ledger::Mode::Process)).value();
  ASSERT_TRUE(parent->try_reserve(dev_, 10));
  Channel ch;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Before adopting its own descriptor the child would see the parent's lock as its own.
    ch.send(parent->reap_dead());
    ch.send(static_cast<long long>(parent->used(dev_)));
    _exit(0);
  }
  EXPECT_EQ(ch.receive(), 0);
  EXPECT_EQ(ch.receive(), 10);
  wait_exit(child);
  EXPECT_EQ(observer_->used(dev_), 10u);
}

TEST_F(ProcessTest, ClaimerThatDiedBeforeLockingIsFreedOnceStale) {
  RawMapping raw(path_);
  ASSERT_TRUE(raw.ok());
  std::uint64_t now = monotonic_ns() / 1000000000ULL;
  raw.slot(5).state.store(layout::slot_word(7, now - 5, layout::kSlotClaiming));
  raw.slot(6).state.store(layout::slot_word(7, now, layout::kSlotClaiming));
  raw.header().slot_high_water.store(7);
  observer_->reap_dead();
  EXPECT_EQ(layout::slot_state(raw.slot(5).state.load()), layout::kSlotFree);
  EXPECT_EQ(layout::slot_state(raw.slot(6).state.load()), layout::kSlotClaiming)
      << "a claim in progress is left alone";
}

TEST_F(ProcessTest, ReapAbandonedMidWayIsFinished) {
  RawMapping raw(path_);
  ASSERT_TRUE(raw.ok());
  std::uint64_t now = monotonic_ns() / 1000000000ULL;
  layout::Slot& s = raw.slot(2);
  s.devices[dev_].charged.store(300);
  s.devices[dev_].granted.store(300);
  s.state.store(layout::slot_word(3, now - 60, layout::kSlotReaping));
  raw.header().slot_high_water.store(3);
  EXPECT_EQ(observer_->used(dev_), 300u);
  observer_->reap_dead();
  EXPECT_EQ(layout::slot_state(s.state.load()), layout::kSlotFree);
  EXPECT_EQ(observer_->used(dev_), 0u);
  EXPECT_EQ(s.devices[dev_].charged.load(), 0u);
}

TEST(ProcIdentity, HostPidFromNamespaces) {
  const char nested[] = "Name:\tx\nNSpid:\t81234\t17\nNSsid:\t1\n";
  const char own_ns[] = "Name:\tx\nNSpid:\t17\n";
  EXPECT_EQ(host_pid_from_status(nested, sizeof nested - 1, false, 17), 81234);
  EXPECT_EQ(host_pid_from_status(own_ns, sizeof own_ns - 1, false, 17), 0);
  EXPECT_EQ(host_pid_from_status(own_ns, sizeof own_ns - 1, true, 17), 17);
  const char junk[] = "NSpid:\tabc\t1\n";
  EXPECT_EQ(host_pid_from_status(junk, sizeof junk - 1, false, 1), 0);
  EXPECT_EQ(host_pid_from_status("", 0, false, 1), 0);
}

TEST(ProcIdentity, CommandLineIsRecorded) {
  std::uint64_t words[layout::kCommandWords] = {};
  read_own_command(words);
  char text[sizeof words + 1] = {};
  std::memcpy(text, words, sizeof words);
  EXPECT_GT(std::strlen(text), 0u);
  EXPECT_NE(std::strstr(text, "shm_tests"), nullptr) << text;
}

}  // namespace
}  // namespace gpuslice::shm
