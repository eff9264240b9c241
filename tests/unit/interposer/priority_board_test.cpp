// The priority gate over the real node channel (the container's presence and its board): several
// containers' records in a node directory.
#include "interposer/priority_board.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>
#include <string>

#include "../test_units.h"
#include "common/clock.h"
#include "interposer/node_presence.h"
#include "limiter/priority_gate.h"
#include "shared_state/peer_record.h"
#include "temp_dir.h"

// Counts the allocations of the calling thread while counting is on (the gate's path must make none).
// The replacement pairs new with malloc and delete with free, which GCC cannot see across calls.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
namespace {
thread_local bool t_counting = false;
thread_local std::size_t t_allocations = 0;
}  // namespace

void* operator new(std::size_t size) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
// The nothrow forms too (the gates allocate their limiters with them): every new and delete of this
// binary then pairs malloc with free, under ASan as well.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (t_counting) ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace gpuslice::interposer {
namespace {

using limiter::DriverOps;
using limiter::PeerView;
using limiter::PriorityGate;
using limiter::PriorityTuning;

using test_units::kMs;
constexpr std::uint64_t kStale = 500 * kMs;
constexpr char kGpu[] = "GPU-6d6f636b-0000-4000-8000-000000000000";

class ManualClock final : public Clock {
 public:
  std::uint64_t now_ns() override { return now; }
  void sleep_ns(std::uint64_t ns) override { now += ns; }
  std::uint64_t now = monotonic_ns();
};

CUresult no_sync() { return CUDA_SUCCESS; }

class PriorityChannel : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  struct Container {
    std::unique_ptr<NodePresence> presence;
    shm::NodeChannel* channel = nullptr;
    std::unique_ptr<PresenceBoard> board;
    std::atomic<std::uint32_t> priority{kNoPriority};
    std::unique_ptr<PriorityGate> gate;
  };
  std::unique_ptr<Container> container(std::uint64_t key, const char* writer, Priority p) {
    auto c = std::make_unique<Container>();
    // What the operator assigned the writer (device plugin, or root on a plain host): the level it claims.
    std::ofstream(dir_ / (writer + std::string(".assigned")))
        << "priority=" << priority_name(p) << "\ncompute=100\n";
    auto opened = NodePresence::open(dir_.path(), kGpu, key, writer);
    EXPECT_TRUE(opened.ok()) << opened.error();
    if (!opened.ok()) return nullptr;
    c->presence = std::move(opened).value();
    c->channel = &c->presence->channel();
    c->board = std::make_unique<PresenceBoard>(*c->presence);
    c->priority.store(priority_value(p));
    DriverOps ops;
    ops.ctx_synchronize = &no_sync;
    c->gate = std::make_unique<PriorityGate>(clock_, ops, c->board.get(), &c->priority);
    return c;
  }

  // The watcher's tick: the listing of the node directory, off the launching threads.
  void watch(Container& c) { c.board->scan(clock_.now, kStale, c.gate->priority()); }

  test::TempDir dir_;
  ManualClock clock_;
};

TEST_F(PriorityChannel, LowIsHeldThroughTheChannelWhileHighIsBusyAndReleasedWhenItsSyncReturns) {
  auto high = container(1, "high", Priority::High);
  auto low = container(2, "low", Priority::Low);
  ASSERT_TRUE(high && low);
  low->gate->heartbeat();
  high->gate->heartbeat();
  watch(*low);
  low->gate->gate(nullptr);  // sees the high one alive and idle: not held
  EXPECT_EQ(low->gate->stats().holds, 0U);
  high->gate->gate(nullptr);      // a launch: busy for the horizon
  high->gate->note_sync_begin();  // waits for its work: busy for the lease
  const std::uint64_t start = clock_.now;
  clock_.now += 2 * kMs;  // the low one's next refresh is due
  low->gate->gate(nullptr);
  // Held until the lease (1 s) or staleness (0.5 s after the last heartbeat) ends it.
  EXPECT_GE(clock_.now - start, PriorityTuning{}.stale_ns);
  EXPECT_EQ(low->gate->stats().holds, 1U);
  // A fresh burst whose sync returns: idle at once, so the low one passes without waiting.
  high->gate->heartbeat();
  high->gate->gate(nullptr);
  high->gate->note_sync_begin();
  high->gate->note_host_sync();
  const std::uint64_t before = clock_.now;
  clock_.now += 2 * kMs;
  low->gate->gate(nullptr);
  EXPECT_EQ(clock_.now, before + 2 * kMs);
}

TEST_F(PriorityChannel, EachFeatureWritesOnlyItsOwnFieldsOfTheContainersOneRecord) {
  auto high = container(1, "high", Priority::High);
  auto reader = container(2, "reader", Priority::Low);
  ASSERT_TRUE(high && reader);
  high->presence->publish_compute_limit(40, clock_.now);  // the compute limit's turns
  high->gate->gate(nullptr);                              // priority sharing's busy
  shm::PeerState peers[4];
  ASSERT_EQ(reader->channel->read_peers(peers, 4, clock_.now), 1U);
  EXPECT_EQ(peers[0].compute_limit_percent, 40U);
  EXPECT_EQ(peers[0].priority, Priority::High);
  EXPECT_GT(peers[0].busy_until_ns, clock_.now);
  // The turns' heartbeat republishes the record: it keeps the priority fields it does not own.
  high->presence->publish_compute_limit(40, clock_.now + kMs);
  ASSERT_EQ(reader->channel->read_peers(peers, 4, clock_.now + kMs), 1U);
  EXPECT_EQ(peers[0].priority, Priority::High);
  EXPECT_GT(peers[0].busy_until_ns, clock_.now);
  // And the priority's heartbeat keeps the limit.
  high->gate->heartbeat();
  ASSERT_EQ(reader->channel->read_peers(peers, 4, clock_.now + kMs), 1U);
  EXPECT_EQ(peers[0].compute_limit_percent, 40U);
}

// Between scans the reader re-reads the files it kept open; nothing it re-reads is trusted more
// than a scan's read: only higher records, validated, fresh.
TEST_F(PriorityChannel, KnownRecordsAreReReadWithoutAScanAndOnlyThoseAboveTheReader) {
  auto high = container(1, "high", Priority::High);
  auto normal = container(2, "normal", Priority::Normal);
  auto low = container(3, "low", Priority::Low);
  ASSERT_TRUE(high && normal && low);
  high->gate->heartbeat();
  normal->gate->heartbeat();
  shm::PeerState peers[4];
  ASSERT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 2U);
  EXPECT_EQ(low->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Low), 2U);
  ASSERT_EQ(normal->channel->scan_peers(peers, 4, clock_.now, kStale),
            1U);  // high only (low never published)
  ASSERT_EQ(normal->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Normal), 1U);
  EXPECT_EQ(peers[0].priority, Priority::High);
  // A fresh publish is what the re-read returns (the same file, read again).
  high->gate->gate(nullptr);
  ASSERT_EQ(normal->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Normal), 1U);
  EXPECT_GT(peers[0].busy_until_ns, clock_.now);
  // A container that appears after the scan is not re-read: the next scan finds it.
  auto late = container(4, "late", Priority::High);
  ASSERT_TRUE(late);
  late->gate->heartbeat();
  EXPECT_EQ(normal->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Normal), 1U);
  EXPECT_EQ(normal->channel->scan_peers(peers, 4, clock_.now, kStale), 2U);
  EXPECT_EQ(normal->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Normal), 2U);
  // Stale records are skipped on re-read as on a scan.
  EXPECT_EQ(normal->channel->read_known_peers(peers, 4, clock_.now + kStale + kMs, kStale, Priority::Normal),
            0U);
}

// The attack: after a reader found its record, a peer replaces it with a symbolic link (to a file
// the peer wants read, here a valid record) or a FIFO (to block the reader's open), or grows it.
// The file the reader kept is the old one; the next scan opens the path again and refuses.
TEST_F(PriorityChannel, ARecordReplacedByASymlinkOrAFifoLaterIsRefusedOnTheNextScan) {
  auto high = container(1, "high", Priority::High);
  auto low = container(2, "low", Priority::Low);
  ASSERT_TRUE(high && low);
  high->gate->gate(nullptr);
  shm::PeerState peers[4];
  ASSERT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 1U);
  const std::string path = high->channel->record_path();
  const std::string moved = dir_ / "high/elsewhere";
  ASSERT_EQ(::rename(path.c_str(), moved.c_str()), 0);
  ASSERT_EQ(::symlink(moved.c_str(), path.c_str()), 0);
  EXPECT_EQ(low->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Low), 1U)
      << "the open file is the old record itself";
  EXPECT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 0U) << "a symbolic link is not followed";
  EXPECT_EQ(low->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Low), 0U);
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0);
  EXPECT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 0U)
      << "a FIFO is neither opened nor waited on";
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_EQ(::rename(moved.c_str(), path.c_str()), 0);
  ASSERT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 1U);
  // Grown past one record: refused by the re-read too.
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  EXPECT_EQ(low->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Low), 0U);
  EXPECT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 0U);
}

// Another writer copies the busy high container's key into idle low records of its own writer
// directories, to be read in its place and release the low container.
TEST_F(PriorityChannel, AnImpersonatorOfTheHighContainerCannotReleaseTheLowOne) {
  auto high = container(0x51, "high", Priority::High);
  auto low = container(2, "low", Priority::Low);
  ASSERT_TRUE(high && low);
  high->gate->gate(nullptr);      // busy for the horizon
  high->gate->note_sync_begin();  // and for the lease while it waits
  shm::detail::PeerRecord forged{};
  std::memcpy(forged.magic, shm::detail::PeerRecord::kMagic, sizeof forged.magic);
  forged.version = shm::detail::PeerRecord::kVersion;
  forged.size = sizeof forged;
  forged.sequence = 1;
  forged.container_key = 0x51;
  forged.uuid_hash = shm::detail::uuid_hash(kGpu);
  forged.priority = priority_value(Priority::Low);
  forged.heartbeat_ns = clock_.now;
  forged.checksum = shm::detail::peer_checksum(forged);
  for (int i = 0; i < 24; ++i) {
    const std::string writer = dir_ / "evil-" + std::to_string(i);
    ASSERT_EQ(mkdir(writer.c_str(), 0755), 0);
    std::ofstream(writer + "/" + kGpu + ".0000000000000051", std::ios::binary)
        .write(reinterpret_cast<const char*>(&forged), sizeof forged);
  }
  const std::uint64_t start = clock_.now;
  clock_.now += 2 * kMs;
  watch(*low);
  low->gate->gate(nullptr);
  EXPECT_EQ(low->gate->stats().holds, 1U) << "the forged idle records released the low container";
  EXPECT_GT(clock_.now - start, 100 * kMs);
}

// What was found (2): the full look at the node directory ran on the launching thread (47-60 ms
// every 100 ms behind 300,000 files). The gate's full look re-reads what the watcher's scan kept.
TEST_F(PriorityChannel, TheGatesFullLookListsNothingOnTheLaunchingThread) {
  auto high = container(1, "high", Priority::High);
  auto low = container(2, "low", Priority::Low);
  ASSERT_TRUE(high && low);
  high->gate->heartbeat();
  PeerView views[8];
  EXPECT_EQ(low->board->read_peers_above(views, 8, clock_.now, kStale, Priority::Low), 0U)
      << "found by a listing on the launching thread";
  watch(*low);
  ASSERT_EQ(low->board->read_peers_above(views, 8, clock_.now, kStale, Priority::Low), 1U);
  EXPECT_EQ(views[0].priority, Priority::High);
}

// PeerBoard::read_peers runs on launching threads, which must not allocate.
TEST_F(PriorityChannel, AScanFromTheGateAllocatesNothing) {
  auto high = container(1, "high", Priority::High);
  auto low = container(2, "low", Priority::Low);
  ASSERT_TRUE(high && low);
  high->gate->heartbeat();
  PeerView views[8];
  t_allocations = 0;
  t_counting = true;
  const std::size_t found = low->board->read_peers(views, 8, clock_.now, kStale);
  const std::size_t reread = low->board->read_known_above(views, 8, clock_.now, kStale, Priority::Low);
  t_counting = false;
  EXPECT_EQ(found, 1U);
  EXPECT_EQ(reread, 1U);
  EXPECT_EQ(t_allocations, 0U);
}

// The application closed a descriptor the reader kept and reused the number for a file of its own
// (a daemon closing every descriptor, say): the next scan must not close the application's file.
TEST_F(PriorityChannel, ADescriptorTheApplicationReusedIsNotClosedByTheNextScan) {
  auto high = container(1, "high", Priority::High);
  auto low = container(2, "low", Priority::Low);
  ASSERT_TRUE(high && low);
  high->gate->heartbeat();
  shm::PeerState peers[4];
  ASSERT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 1U);
  // The reader's descriptor: read-only, on the high record (the writer's own is read-write).
  int kept = -1;
  DIR* fds = opendir("/proc/self/fd");
  ASSERT_NE(fds, nullptr);
  while (dirent* e = readdir(fds)) {
    const int fd = std::atoi(e->d_name);
    char target[4096] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (e->d_name[0] == '.' || readlink(link.c_str(), target, sizeof target - 1) < 0) continue;
    if (high->channel->record_path() == target && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY) kept = fd;
  }
  closedir(fds);
  ASSERT_GE(kept, 0);
  const std::string mine = dir_ / "application-file";
  const int app = open(mine.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(app, 0);
  ASSERT_EQ(dup2(app, kept), kept);  // the application's file now has the kept number
  close(app);
  EXPECT_EQ(low->channel->read_known_peers(peers, 4, clock_.now, kStale, Priority::Low), 0U)
      << "not a record: nothing read from it";
  EXPECT_EQ(low->channel->scan_peers(peers, 4, clock_.now, kStale), 1U);
  struct stat after {};
  struct stat expected {};
  ASSERT_EQ(fstat(kept, &after), 0) << "the application's descriptor was closed";
  ASSERT_EQ(stat(mine.c_str(), &expected), 0);
  EXPECT_EQ(after.st_ino, expected.st_ino);
  close(kept);
}

}  // namespace
}  // namespace gpuslice::interposer
