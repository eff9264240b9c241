// The writer index of a shared node directory (node/channel/writer_indexer.h): what it names, how it
// follows the directory, and that readers of the node channel then find writers without listing.
#include "node/channel/writer_indexer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "node/channel/index_mode.h"
#include "node/serve_mode.h"
#include "shared_state/node_channel.h"
#include "shared_state/writer_index.h"
#include "temp_dir.h"

namespace gpuslice::node {
namespace {

using namespace std::chrono_literals;

class WriterIndexerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to make directories as other users";
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_EQ(chmod(dir_.path().c_str(), 01777), 0);  // a node directory the operator shares
  }
  // A directory `name` owned by `uid`.
  void directory(const std::string& name, uid_t uid, mode_t mode = 0755) {
    ASSERT_EQ(mkdir(dir_.file(name).c_str(), mode), 0);
    ASSERT_EQ(chmod(dir_.file(name).c_str(), mode), 0);
    ASSERT_EQ(chown(dir_.file(name).c_str(), uid, uid), 0);
  }
  void files(int count, const std::string& prefix = "junk-") {
    for (int i = 0; i < count; ++i) {
      const int fd = ::open(dir_.file(prefix + std::to_string(i)).c_str(), O_CREAT | O_WRONLY, 0644);
      ASSERT_GE(fd, 0);
      ::close(fd);
    }
  }
  std::unique_ptr<WriterIndexer> indexer(std::chrono::milliseconds min_relist_gap = 1000ms) {
    WriterIndexer::Options options;
    options.node_dir = dir_.path();
    options.min_relist_gap = min_relist_gap;
    auto opened = WriterIndexer::open(options);
    EXPECT_TRUE(opened.ok()) << opened.error();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }
  // The names in the index file, as a reader takes them (nothing when it is refused).
  std::set<std::string> indexed() {
    std::ifstream in(dir_.file(".writers"), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::size_t count = 0;
    EXPECT_EQ(shm::writer_index_error(text.str(), &count), nullptr) << text.str();
    std::set<std::string> names;
    shm::for_each_indexed_writer(
        text.str(),
        [](void* out, std::string_view name) { static_cast<std::set<std::string>*>(out)->emplace(name); },
        &names);
    return names;
  }

  gpuslice::test::TempDir dir_{"gpuslice-writer-index"};
};

// It names the writer directories every reader believes (uid-N owned by N, other names owned by
// root), with or without an assignment, and nothing a tenant made for nobody: files, directories
// of other names, a uid-N of another owner, a directory anybody can write, links.
TEST_F(WriterIndexerTest, TheIndexNamesTheWritersEveryReaderBelievesAndNothingElse) {
  directory("uid-65534", 65534);
  directory("ctr-device-plugin", 0);
  directory("uid-65533", 65534);    // not its uid's
  directory("tenant-junk", 65534);  // a name only root may own
  directory("ctr-open", 0, 0777);   // anybody could change it
  files(50);
  ASSERT_EQ(symlink("ctr-device-plugin", dir_.file("ctr-link").c_str()), 0);
  std::ofstream(dir_.file("uid-65534.assigned")) << "priority=low\n";
  auto keeper = indexer();
  ASSERT_NE(keeper, nullptr);
  const std::set<std::string> expected = {"ctr-device-plugin", "uid-65534"};
  EXPECT_EQ(std::set<std::string>(keeper->writers().begin(), keeper->writers().end()), expected);
  EXPECT_EQ(indexed(), expected);
  struct stat st {};
  ASSERT_EQ(stat(dir_.file(".writers").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(st.st_mode & 07777, 0644U);
}

// Writers that appear, go, are renamed or lose their trust are followed from inotify's events alone
// (no relisting), one step after they happened.
TEST_F(WriterIndexerTest, WritersAreAddedAndRemovedFromTheDirectorysEvents) {
  auto keeper = indexer();
  ASSERT_NE(keeper, nullptr);
  EXPECT_TRUE(indexed().empty());
  const std::uint64_t listings = keeper->listings();
  directory("ctr-a", 0);
  directory("uid-65534", 65534);
  files(20);
  keeper->step(0ms);
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-a", "uid-65534"}));
  ASSERT_EQ(rename(dir_.file("ctr-a").c_str(), dir_.file("ctr-b").c_str()), 0);
  keeper->step(0ms);
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-b", "uid-65534"}));
  ASSERT_EQ(chmod(dir_.file("ctr-b").c_str(), 0777), 0);  // anybody could change it now
  keeper->step(0ms);
  EXPECT_EQ(indexed(), (std::set<std::string>{"uid-65534"}));
  ASSERT_EQ(chmod(dir_.file("ctr-b").c_str(), 0755), 0);
  ASSERT_EQ(rmdir(dir_.file("uid-65534").c_str()), 0);
  keeper->step(0ms);
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-b"}));
  EXPECT_EQ(keeper->listings(), listings) << "events were enough";
}

// More events than inotify queues (a tenant's flood between two steps) lose some: the overflow is
// followed by a whole relisting, which finds the writer that appeared in the middle of it.
TEST_F(WriterIndexerTest, AnOverflowOfTheEventQueueIsFollowedByAWholeRelisting) {
  int queued = 0;
  std::ifstream("/proc/sys/fs/inotify/max_queued_events") >> queued;
  if (queued <= 0 || queued > 100'000) GTEST_SKIP() << "max_queued_events " << queued;
  auto keeper = indexer(0ms);
  ASSERT_NE(keeper, nullptr);
  const std::uint64_t listings = keeper->listings();
  files(queued / 2 + 10, "a-");
  directory("ctr-in-the-flood", 0);
  files(queued / 2 + 10, "b-");
  keeper->step(0ms);
  EXPECT_GE(keeper->overflows(), 1U);
  EXPECT_EQ(keeper->listings(), listings + 1);
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-in-the-flood"}));
}

// The node directory removed or moved away and made again (an operator's cleanup, a reboot of a
// tmpfs): the keeper watches and indexes the new one, and no longer the old.
TEST_F(WriterIndexerTest, ANodeDirectoryMadeAgainIsWatchedAgain) {
  directory("ctr-a", 0);
  auto keeper = indexer();
  ASSERT_NE(keeper, nullptr);
  const std::string moved = dir_.path() + "-moved";
  ASSERT_EQ(rename(dir_.path().c_str(), moved.c_str()), 0);
  ASSERT_EQ(mkdir(dir_.path().c_str(), 01777), 0);
  ASSERT_EQ(chmod(dir_.path().c_str(), 01777), 0);
  directory("ctr-b", 0);
  keeper->step(0ms);  // learns the directory went away
  keeper->step(0ms);  // opens, lists and indexes the new one
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-b"}));
  ASSERT_EQ(mkdir((moved + "/ctr-old").c_str(), 0755), 0);
  directory("ctr-c", 0);
  keeper->step(0ms);
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-b", "ctr-c"}));
  std::filesystem::remove_all(moved);
}

// A tenant that takes the index's name first (anyone may create a name in a shared directory) or
// removes nothing: the keeper replaces what is there with its own file.
TEST_F(WriterIndexerTest, AnIndexATenantPlantedIsReplacedByTheKeepersOwn) {
  std::ofstream(dir_.file(".writers")) << "gpuslice-writer-index 1\nend 0\n";
  ASSERT_EQ(chown(dir_.file(".writers").c_str(), 65534, 65534), 0);
  directory("ctr-a", 0);
  auto keeper = indexer();
  ASSERT_NE(keeper, nullptr);
  struct stat st {};
  ASSERT_EQ(lstat(dir_.file(".writers").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(indexed(), (std::set<std::string>{"ctr-a"}));
  keeper->remove_index();
  EXPECT_NE(lstat(dir_.file(".writers").c_str(), &st), 0) << "a stopped keeper leaves no index to go stale";
}

// End to end: beside a tenant's 5,000 files, a reader of the node channel lists nothing while the
// keeper's index stands, and finds a writer that appears at its first scan after the keeper's next
// step. The time from the writer's record to a reader's finding it, with the keeper stepping on its
// own thread as `gpuslice-node index` does and the reader scanning every 10 ms, is printed.
TEST_F(WriterIndexerTest, AReaderFindsANewWriterOnceTheKeeperIndexedItWithoutListing) {
  constexpr char kGpu[] = "GPU-aaaa-bbbb";
  files(5'000);
  auto keeper = indexer();
  ASSERT_NE(keeper, nullptr);
  auto reader = shm::NodeChannel::open(dir_.path(), kGpu, 0x11, "ctr-reader");
  ASSERT_TRUE(reader.ok()) << reader.error();
  keeper->step(0ms);
  shm::PeerState seen[8];
  const auto now = [] {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
  };
  EXPECT_EQ((*reader)->read_peers(seen, 8, now()), 0U);
  auto late = shm::NodeChannel::open(dir_.path(), kGpu, 0x22, "ctr-late");
  ASSERT_TRUE(late.ok()) << late.error();
  shm::PeerState own;
  ASSERT_TRUE((*late)->publish(own));
  EXPECT_EQ((*reader)->read_peers(seen, 8, now()), 0U) << "not indexed yet";
  keeper->step(0ms);
  EXPECT_EQ((*reader)->read_peers(seen, 8, now()), 1U) << "indexed: found at the next scan";
  EXPECT_EQ((*reader)->entries_listed(), 0U);

  // The same, timed, as the daemon runs.
  std::atomic<bool> stop{false};
  std::thread stepping([&] {
    while (!stop) keeper->step(50ms);
  });
  const auto appeared = std::chrono::steady_clock::now();
  auto timed = shm::NodeChannel::open(dir_.path(), kGpu, 0x44, "ctr-timed");
  ASSERT_TRUE(timed.ok()) << timed.error();
  ASSERT_TRUE((*timed)->publish(own));
  std::size_t count = 0;
  while (count < 2 && std::chrono::steady_clock::now() - appeared < 10s) {
    count = (*reader)->read_peers(seen, 8, now());
    if (count < 2) std::this_thread::sleep_for(10ms);
  }
  const double found_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - appeared).count();
  stop = true;
  stepping.join();
  EXPECT_EQ(count, 2U) << "the new writer was not found";
  EXPECT_EQ((*reader)->entries_listed(), 0U);
  std::printf(
      "a new writer directory was found by a reader %.1f ms after it appeared (keeper waiting for events 50 "
      "ms at a time, "
      "reader scan every 10 ms)\n",
      found_ms);
}

// `gpuslice-node index`: the node directory is required; a refresh readers would not see in time
// and a relisting more often than once a second are refused with what is expected.
TEST(IndexMode, FlagsAreCheckedAgainstWhatReadersBelieve) {
  const auto no_env = [](const char*) -> const char* { return nullptr; };
  IndexModeOptions options;
  ParseOutcome parsed = parse_index_options({}, no_env, options);
  EXPECT_NE(parsed.message.find("--node-dir"), std::string::npos) << parsed.message;
  options = {};
  parsed = parse_index_options({"--node-dir", "/run/gpuslice/node"}, no_env, options);
  EXPECT_TRUE(parsed.message.empty()) << parsed.message;
  EXPECT_EQ(options.refresh, 10s);
  EXPECT_EQ(options.relist, 60s);
  options = {};
  parsed = parse_index_options({"--node-dir", "/n", "--refresh", "30s"}, no_env, options);
  EXPECT_NE(parsed.message.find("expected 100ms to 15s"), std::string::npos) << parsed.message;
  options = {};
  parsed = parse_index_options({"--node-dir", "/n", "--relist", "10ms"}, no_env, options);
  EXPECT_NE(parsed.message.find("at least 1s"), std::string::npos) << parsed.message;
  const auto from_env = [](const char* name) -> const char* {
    return std::string(name) == "GPUSLICE_NODE_DIR" ? "/srv/node" : nullptr;
  };
  options = {};
  parsed = parse_index_options({}, from_env, options);
  EXPECT_TRUE(parsed.message.empty()) << parsed.message;
  EXPECT_EQ(options.node_dir, "/srv/node");
}

// `gpuslice-node serve --index-node-dir DIR` keeps the same index on a thread; none by default.
TEST(IndexMode, ServeKeepsAnIndexOnlyWhenAskedTo) {
  const auto no_env = [](const char*) -> const char* { return nullptr; };
  ServeOptions options;
  ASSERT_EQ(parse_serve_options({}, no_env, options).message, "");
  EXPECT_EQ(options.index_node_dir, "");
  options = {};
  ASSERT_EQ(parse_serve_options({"--index-node-dir", "/run/gpuslice/node"}, no_env, options).message, "");
  EXPECT_EQ(options.index_node_dir, "/run/gpuslice/node");
  EXPECT_NE(usage_serve().find("--index-node-dir"), std::string::npos);
}

}  // namespace
}  // namespace gpuslice::node
