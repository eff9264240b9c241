// Fuzzes apply_limits_file: each input is written to a private temporary file and applied on top
// of settings that already carry limits from the environment, which it must never change, and a
// priority the file's level may lower but never raise.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "config/settings.h"
#include "fuzz_check.h"

namespace {

std::string g_dir;
std::string g_path;

void remove_temp_files() {
  ::unlink(g_path.c_str());
  ::rmdir(g_dir.c_str());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gpuslice-fuzz-limits-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  g_dir = pattern;
  g_path = g_dir + "/limits";
  std::atexit(remove_temp_files);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = ::open(g_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  FUZZ_CHECK(fd >= 0);
  std::size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(fd, data + written, size - written);
    FUZZ_CHECK(n > 0);
    written += static_cast<std::size_t>(n);
  }
  ::close(fd);

  gpuslice::config::Settings settings;
  settings.memory.by_index = {{0, 8ULL << 30}};
  settings.memory.by_uuid = {{"gpu-a", 4ULL << 30}};
  settings.compute.all = 50;
  settings.priority = gpuslice::Priority::Normal;
  settings.guarantee.all = 2ULL << 30;
  const gpuslice::config::Settings before = settings;
  gpuslice::config::apply_limits_file(settings, g_path);

  FUZZ_CHECK(settings.errors.size() <= 1);
  // The file's priority is a ceiling: it never raises the level asked for.
  FUZZ_CHECK(settings.priority.has_value() && gpuslice::priority_value(*settings.priority) <=
                                                  gpuslice::priority_value(gpuslice::Priority::Normal));
  // The environment's requests are never touched by the file: caps are kept apart.
  for (int index : {0, 1, 5}) {
    for (const char* uuid : {"", "GPU-A", "gpu-b"}) {
      FUZZ_CHECK(settings.memory.lookup(index, uuid) == before.memory.lookup(index, uuid));
      FUZZ_CHECK(settings.compute.lookup(index, uuid) == before.compute.lookup(index, uuid));
      FUZZ_CHECK(settings.guarantee.lookup(index, uuid) == before.guarantee.lookup(index, uuid));
    }
  }
  if (!settings.ok()) {
    // A malformed file applies nothing.
    FUZZ_CHECK(settings.memory_cap.empty() && settings.compute_cap.empty() && settings.guarantee_cap.empty());
    FUZZ_CHECK(settings.mps_compute == gpuslice::config::MpsComputeMode::Time);
    FUZZ_CHECK(settings.priority == before.priority);
    return 0;
  }
  // Whatever the file says, a cap is a real limit: bytes > 0 and below 2^64-1, percent 1..100.
  for (int index : {0, 1, 5}) {
    for (const char* uuid : {"", "GPU-A", "gpu-b"}) {
      if (const auto cap = settings.memory_cap.lookup(index, uuid)) FUZZ_CHECK(*cap > 0 && *cap < ~0ULL);
      if (const auto cap = settings.compute_cap.lookup(index, uuid)) FUZZ_CHECK(*cap >= 1 && *cap <= 100);
      // A file's guarantee is never above its own limit, for every device the parser can match: all
      // of them unless one side keys a device by index and the other by UUID (checked by the library
      // once it knows both).
      const auto guarantee = settings.guarantee_cap.lookup(index, uuid);
      const auto limit = settings.memory_cap.lookup(index, uuid);
      if (guarantee) FUZZ_CHECK(*guarantee > 0 && *guarantee < ~0ULL);
      const auto& g = settings.guarantee_cap;
      const auto& m = settings.memory_cap;
      const bool matchable = uuid[0] == '\0' || (g.by_uuid.empty() && m.by_uuid.empty()) ||
                             (g.by_index.empty() && m.by_index.empty());
      if (guarantee && limit && matchable) FUZZ_CHECK(*guarantee <= *limit);
    }
  }
  return 0;
}
