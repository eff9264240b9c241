// Attacks a neighbouring tenant or a second local user can make on the state file, each a
// regression test named after the attack. Attacks that need a second uid run in a forked child that
// drops to uid/gid 65534 (the tests run as root in CI; they skip otherwise).
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "shared_state/fault_guard.h"
#include "shared_state/layout.h"
#include "shared_state/ledger.h"
#include "test_util.h"

namespace gpuslice::shm {
namespace {

using testing::kTotal;
using testing::kUuid;
using testing::TempDir;
constexpr uid_t kOtherUid = 65534;

std::unique_ptr<Ledger> open_or_fail(const std::string& path, Ledger::Mode mode) {
  auto opened = Ledger::open(path, mode);
  EXPECT_TRUE(opened.ok()) << opened.error();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

// Runs `body` in a child as uid/gid 65534; returns its exit code, or 128+signal.
template <class Body>
int run_as_other_user(Body body, int timeout_seconds = 5) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(static_cast<unsigned>(timeout_seconds));
    if (setgroups(0, nullptr) != 0 || setresgid(kOtherUid, kOtherUid, kOtherUid) != 0 ||
        setresuid(kOtherUid, kOtherUid, kOtherUid) != 0) {
      _exit(99);
    }
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class StateFileAttack : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("state");
    owner_ = open_or_fail(path_, Ledger::Mode::Process);
    ASSERT_NE(owner_, nullptr);
    auto dev = owner_->attach_device(kUuid, 0, kTotal, 1000, kNoComputeLimit);
    ASSERT_TRUE(dev.ok()) << dev.error();
    dev_ = *dev;
  }

  TempDir dir_;
  std::string path_;
  std::unique_ptr<Ledger> owner_;
  int dev_ = -1;
};

TEST_F(StateFileAttack, TruncatedStateFileDoesNotCrashAnObserver) {
  auto observer = open_or_fail(path_, Ledger::Mode::Observer);
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(observer->snapshot().error.empty());
  // The tenant truncates its own file while the daemon keeps observing it.
  EXPECT_EXIT(
      {
        if (truncate(path_.c_str(), 0) != 0) _exit(2);
        Snapshot snap = observer->snapshot();
        if (snap.error.empty() || !snap.devices.empty()) _exit(3);
        observer->reap_dead();
        observer->set_quota(dev_, 5);
        observer->set_compute_limit(dev_, 5);
        (void)observer->used(dev_);
        (void)observer->quota(dev_);
        (void)observer->find_device(kUuid);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(StateFileAttack, StateFileTruncatedToItsHeaderDoesNotCrashAnObserver) {
  auto observer = open_or_fail(path_, Ledger::Mode::Observer);
  ASSERT_NE(observer, nullptr);
  EXPECT_EXIT(
      {
        if (truncate(path_.c_str(), static_cast<off_t>(layout::kHeaderBytes)) != 0) _exit(2);
        if (observer->snapshot().error.empty()) _exit(3);
        observer->reap_dead();
        observer->set_quota(dev_, 5);
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(FaultGuard, SigbusOnATruncatedMappingBecomesAnError) {
  TempDir dir;
  std::string path = dir.file("victim");
  int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 8192), 0);
  void* base = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  auto store = [](void* p) { static_cast<volatile char*>(p)[4096] = 1; };
  EXPECT_TRUE(detail::run_fault_guarded(store, base));
  ASSERT_EQ(ftruncate(fd, 0), 0);
  EXPECT_FALSE(detail::run_fault_guarded(store, base));
  // The guard is reusable after a fault.
  EXPECT_FALSE(detail::run_fault_guarded(store, base));
  munmap(base, 8192);
  close(fd);
}

TEST_F(StateFileAttack, ObserverSetsLimitsThatTheProcessSees) {
  auto observer = open_or_fail(path_, Ledger::Mode::Observer);
  ASSERT_NE(observer, nullptr);
  observer->set_quota(dev_, 4242);
  observer->set_compute_limit(dev_, 30);
  EXPECT_EQ(owner_->quota(dev_), 4242U);
  EXPECT_EQ(owner_->compute_limit(dev_), 30U);
  EXPECT_EQ(observer->quota(dev_), 4242U);
  EXPECT_EQ(observer->compute_limit(dev_), 30U);
}

TEST_F(StateFileAttack, StateFileSymlinkToAnotherTenantIsRefused) {
  // Tenant 1 replaces its state file with a link to tenant 2's; the daemon then opens "tenant 1".
  TempDir tenant1;
  std::string planted = tenant1.file("state");
  ASSERT_EQ(symlink(path_.c_str(), planted.c_str()), 0);
  auto opened = Ledger::open(planted, Ledger::Mode::Observer);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().find("symbolic link"), std::string::npos) << opened.error();
  EXPECT_EQ(owner_->quota(dev_), 1000U);
  EXPECT_FALSE(Ledger::open(planted, Ledger::Mode::Process).ok());
}

TEST(StateFileKinds, StatusDoesNotHangOnAFifoStateFile) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  std::string fifo = dir.file("state");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  // As root the read-write open of a FIFO succeeds; as another user it fails with EACCES and the
  // read-only retry used to block forever waiting for a writer.
  auto start = std::chrono::steady_clock::now();
  auto as_root = Ledger::open(fifo, Ledger::Mode::Observer);
  EXPECT_FALSE(as_root.ok());
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to a second uid";
  int code = run_as_other_user([&] {
    auto opened = Ledger::open(fifo, Ledger::Mode::Observer);
    return opened.ok() ? 1 : 0;
  });
  EXPECT_EQ(code, 0) << "128+14 means the observer hung until SIGALRM";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST(StateFileKinds, DeviceNodeStateFileIsRefused) {
  TempDir dir;
  ASSERT_EQ(symlink("/dev/zero", dir.file("state").c_str()), 0);
  EXPECT_FALSE(Ledger::open(dir.file("state"), Ledger::Mode::Observer).ok());
  if (geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  TempDir dir2;
  if (mknod(dir2.file("state").c_str(), S_IFCHR | 0666, makedev(1, 5)) != 0) GTEST_SKIP() << "no mknod here";
  auto opened = Ledger::open(dir2.file("state"), Ledger::Mode::Observer);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().find("device"), std::string::npos) << opened.error();
}

TEST(StateFileModes, NewStateFileIsPrivateToItsOwner) {
  TempDir dir;
  std::string path = dir.file("sub/state");
  auto ledger = open_or_fail(path, Ledger::Mode::Process);
  ASSERT_NE(ledger, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600U);
  ASSERT_EQ(stat(dir.file("sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700U);
}

TEST(StateFileModes, GroupSharedDirectoryGivesAGroupWritableFile) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 02770), 0);
  auto ledger = open_or_fail(dir.file("state"), Ledger::Mode::Process);
  ASSERT_NE(ledger, nullptr);
  struct stat st {};
  ASSERT_EQ(stat(dir.file("state").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660U);
}

TEST(StateFileModes, WorldWritableDirectoryWithoutStickyBitIsRefused) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  auto opened = Ledger::open(dir.file("state"), Ledger::Mode::Process);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().find("sticky"), std::string::npos) << opened.error();
}

TEST(StateFileModes, StateDirectoryOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  TempDir dir;
  // The other user squatted the shared directory before us.
  ASSERT_EQ(chown(dir.path().c_str(), kOtherUid, kOtherUid), 0);
  auto opened = Ledger::open(dir.file("state"), Ledger::Mode::Process);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().find("uid 65534"), std::string::npos) << opened.error();
}

TEST(StateFileModes, StateFileSquattedByAnotherUserInAStickyDirectoryIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to a second uid";
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  std::string path = dir.file("state");
  // The other user creates the state file first (a valid one, world-writable as the old code made it).
  int code = run_as_other_user([&] {
    auto opened = Ledger::open(path, Ledger::Mode::Process);
    if (!opened.ok()) return 1;
    return chmod(path.c_str(), 0666) == 0 ? 0 : 2;
  });
  ASSERT_EQ(code, 0);
  // Using it would let that user read our command lines and change our quota.
  auto ours = Ledger::open(path, Ledger::Mode::Process);
  ASSERT_FALSE(ours.ok());
  EXPECT_NE(ours.error().find("owned by uid 65534"), std::string::npos) << ours.error();
}

}  // namespace
}  // namespace gpuslice::shm
