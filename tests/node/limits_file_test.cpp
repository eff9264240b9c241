#include "node/host/limits_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "config/limits_file.h"
#include "config/settings.h"
#include "node/api/limits_api.h"
#include "shared_state/ledger.h"
#include "test_util.h"

namespace gpuslice::node {
namespace {

TEST(LimitsFile, RendersWhatConfigReadsBack) {
  test::TempDir dir;
  Limits limits;
  limits.memory = "{\"GPU-aaaaaaaa-1111-4000-8000-000000000000\":1073741824}";
  limits.compute = "30";
  ASSERT_TRUE(write_file_atomically(dir / "limits", render_limits(limits)).ok());

  // The interposer's own reader must see the same caps.
  config::Settings settings;
  config::apply_limits_file(settings, dir / "limits");
  ASSERT_TRUE(settings.ok()) << settings.errors.front();
  EXPECT_EQ(settings.memory_cap.lookup(0, "GPU-aaaaaaaa-1111-4000-8000-000000000000"), 1073741824u);
  EXPECT_EQ(settings.compute_cap.lookup(0, "GPU-aaaaaaaa-1111-4000-8000-000000000000"), 30u);

  auto back = read_limits_file(dir / "limits");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->memory, limits.memory);
  EXPECT_EQ(back->compute, limits.compute);
}

TEST(LimitsFile, ParsesCommentsWhitespaceAndCrlf) {
  auto parsed = parse_limits("# caps\n\nGPUSLICE_MEMORY_LIMIT = 8Gi\r\nGPUSLICE_COMPUTE_LIMIT=0=30,1=50\n");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->memory, "8Gi");
  EXPECT_EQ(parsed->compute, "0=30,1=50");

  auto bad = parse_limits("GPUSLICE_MEMORY_LIMIT=1Gi\njunk line\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("line 2"), std::string::npos) << bad.error();
}

// The daemon used to keep keys and values the library rejects, so it answered "ok" for a file that
// makes every process of the container fail closed. Both now read with one parser.
TEST(LimitsFile, TheDaemonRejectsExactlyTheFilesTheLibraryRejects) {
  test::TempDir dir;
  const std::string files[] = {
      "GPUSLICE_MEMORY_LIMIT=8Gi\n",
      "OTHER=1\n",
      "GPUSLICE_MEMORY_LIMIT=8Gi\nOTHER=1\n",
      "GPUSLICE_MEMORY_LIMIT=8Gx\n",
      "GPUSLICE_MEMORY_LIMIT=8Gi\nGPUSLICE_MEMORY_LIMIT=4Gi\n",
      "GPUSLICE_COMPUTE_LIMIT=150\n",
      "GPUSLICE_COMPUTE_LIMIT=0=30,0=40\n",
      "GPUSLICE_MEMORY_LIMIT=18446744073709551615\n",
      "GPUSLICE_MEMORY_LIMIT={\"0\": 1, \"0\": 2}\n",
      "GPUSLICE_MEMORY_LIMIT=\n",
      "=8Gi\n",
      "# only a comment\n",
      std::string("GPUSLICE_MEMORY_LIMIT=8Gi\0\n", 27),
  };
  for (const std::string& text : files) {
    test::write_file(dir / "limits", text);
    config::Settings library;
    config::apply_limits_file(library, dir / "limits");
    auto daemon = read_limits_file(dir / "limits");
    EXPECT_EQ(daemon.ok(), library.ok()) << text << " daemon: " << (daemon.ok() ? "ok" : daemon.error())
                                         << " library: " << (library.ok() ? "ok" : library.errors.front());
  }
}

TEST(LimitsFile, PutAcceptsExactlyTheValuesTheLibraryAccepts) {
  const char* values[] = {"8Gi",
                          "0=8Gi,1=4Gi",
                          "18446744073709551615",
                          "1Gi\\nGPUSLICE_COMPUTE_LIMIT=100",
                          "{}",
                          "0",
                          "{\"0\": \"1Gi\", \"0\": \"2Gi\"}",
                          "64=1Gi",
                          "1.5Gi",
                          " 1Gi "};
  for (const char* value : values) {
    nlohmann::json body = {{"memory", value}};
    LimitsUpdate update;
    const bool put_ok = !parse_limits_request(body.dump(), update);
    const bool library_ok =
        config::parse_limits_file(std::string("GPUSLICE_MEMORY_LIMIT=") + value + "\n").ok();
    EXPECT_EQ(put_ok, library_ok) << value;
    if (put_ok) {
      EXPECT_TRUE(config::parse_limits_file(render_limits({update.memory, {}, {}, {}})).ok()) << value;
    }
  }
}

TEST(LimitsFile, MissingFileIsEmptyAndWriteReplacesAtomically) {
  test::TempDir dir;
  auto missing = read_limits_file(dir / "nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_TRUE(missing->empty());

  const std::string path = dir / "sub/limits";
  ASSERT_TRUE(write_file_atomically(path, "A=1\n").ok());
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_TRUE(write_file_atomically(path, "A=2\n", 0640).ok());
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "replaced by rename, not rewritten in place";
  EXPECT_EQ(after.st_mode & 0777, 0640u);
  EXPECT_EQ(test::read_file(path), "A=2\n");
  // No temporary file left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "sub"))
    entries += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(entries, 1);
}

TEST(LimitsFile, AnUpdateNeverWritesAFileTheLibraryWouldRefuse) {
  test::TempDir dir;
  auto refused = update_limits_file(dir / "limits", [](Limits& l) { l.memory = "lots"; });
  EXPECT_FALSE(refused.ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "limits"));
}

// Two writers changing different keys at once (two PUT /limits): each update is a read-modify-
// write of the whole file, so without a lock one writer's stale copy can revert the other's
// acknowledged value.
TEST(LimitsFile, ConcurrentWritersNeverLoseAnAcknowledgedUpdate) {
  test::TempDir dir;
  HostLayout layout(dir.path());
  std::filesystem::create_directories(layout.config_dir("c1"));
  constexpr int kRounds = 150;
  std::atomic<int> lost{0};
  // Each writer's values only grow, so an older one coming back is visible.
  auto value = [](bool memory, int i) {
    return memory ? (static_cast<long long>(i) << 20) : 1 + i * 99 / kRounds;
  };
  auto writer = [&](bool memory) {
    for (int i = 1; i <= kRounds; ++i) {
      LimitsUpdate update;
      (memory ? update.memory : update.compute) = std::to_string(value(memory, i));
      LimitsApplied applied;
      if (apply_limits(layout, "c1", update, {}, applied)) {
        ++lost;
        continue;
      }
      // Acknowledged: no later write of the *other* key may bring an older value of ours back.
      auto now = read_limits_file(layout.limits_file("c1"));
      if (!now.ok()) {
        ++lost;
        continue;
      }
      const std::optional<std::string>& mine = memory ? now->memory : now->compute;
      if (!mine || std::stoll(*mine) < value(memory, i)) ++lost;
    }
  };
  std::thread a(writer, true);
  std::thread b(writer, false);
  a.join();
  b.join();
  // The last acknowledged value of each key survives.
  auto final_limits = read_limits_file(layout.limits_file("c1"));
  ASSERT_TRUE(final_limits.ok()) << final_limits.error();
  EXPECT_EQ(final_limits->memory, std::to_string(value(true, kRounds)));
  EXPECT_EQ(final_limits->compute, std::to_string(value(false, kRounds)));
  EXPECT_EQ(lost.load(), 0);
}

// Two PUT /limits at once, the looser one first: its ledger update must not land after the stricter
// one's file write, or the processes run under the looser cap while the file says the stricter. The
// looser request's ledger opener waits (boundedly) for the stricter request to finish: with the
// ledger written outside the file's lock the stricter one runs in that gap and the looser cap lands
// last; under the lock the stricter one has to wait, and lands last.
TEST(LimitsFile, ConcurrentPutsCannotLeaveTheLedgerCapLooserThanTheFile) {
  test::TempDir dir;
  HostLayout layout(dir.path());
  std::filesystem::create_directories(layout.config_dir("c1"));
  auto process = shm::Ledger::open(layout.state_file("c1"), shm::Ledger::Mode::Process);
  ASSERT_TRUE(process.ok()) << process.error();
  ASSERT_TRUE(
      (*process)
          ->attach_device("GPU-11111111-aaaa-4000-8000-000000000000", 0, 80ULL << 30, shm::kUnlimited, 0)
          .ok());

  std::mutex mutex;
  std::condition_variable changed;
  bool loose_in_opener = false, strict_done = false;
  LedgerOpener loose_opener = [&](const std::string& path) {
    std::unique_lock lock(mutex);
    loose_in_opener = true;
    changed.notify_all();
    changed.wait_for(lock, std::chrono::milliseconds(1500), [&] { return strict_done; });
    return shm::Ledger::open(path, shm::Ledger::Mode::Observer);
  };
  LimitsUpdate loose, strict;
  loose.memory = "16Gi";
  strict.memory = "4Gi";
  LimitsApplied loose_applied, strict_applied;
  std::optional<ApiError> loose_error, strict_error;
  std::thread first([&] { loose_error = apply_limits(layout, "c1", loose, loose_opener, loose_applied); });
  {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, std::chrono::seconds(10), [&] { return loose_in_opener; });
  }
  std::thread second([&] {
    strict_error = apply_limits(layout, "c1", strict, {}, strict_applied);
    std::lock_guard lock(mutex);
    strict_done = true;
    changed.notify_all();
  });
  first.join();
  second.join();
  ASSERT_FALSE(loose_error) << loose_error->message;
  ASSERT_FALSE(strict_error) << strict_error->message;

  auto file = read_limits_file(layout.limits_file("c1"));
  ASSERT_TRUE(file.ok()) << file.error();
  ASSERT_TRUE(file->memory);
  const shm::Snapshot snap = (*process)->snapshot();
  ASSERT_EQ(snap.devices.size(), 1u);
  const std::uint64_t file_cap = *file->memory == "4Gi" ? 4ULL << 30 : 16ULL << 30;
  EXPECT_EQ(snap.devices[0].cap.quota, file_cap)
      << "the file says " << *file->memory << " but the processes are held to " << snap.devices[0].cap.quota;
}

// The library notices a new limits file by its mtime and size. Two writes of the same size within
// one tick of the filesystem clock would look alike, so each write's mtime must pass the previous.
TEST(LimitsFile, EveryUpdateMovesTheMtimeForward) {
  test::TempDir dir;
  const std::string path = dir / "limits";
  ASSERT_TRUE(update_limits_file(path, [](Limits& l) { l.memory = "8Gi"; }).ok());
  // A file whose mtime is ahead of the clock stands for one written within the current tick.
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  timespec ahead[2] = {{0, UTIME_OMIT}, {before.st_mtim.tv_sec + 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), ahead, 0), 0);
  ASSERT_TRUE(update_limits_file(path, [](Limits& l) { l.memory = "4Gi"; }).ok());  // same size
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  EXPECT_TRUE(after.st_mtim.tv_sec > ahead[1].tv_sec ||
              (after.st_mtim.tv_sec == ahead[1].tv_sec && after.st_mtim.tv_nsec > ahead[1].tv_nsec))
      << "a reader comparing mtime and size would miss this change";
  EXPECT_NE(after.st_ino, before.st_ino) << "replaced by rename";
}

}  // namespace
}  // namespace gpuslice::node
