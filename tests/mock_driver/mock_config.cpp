#include "mock_config.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "mock_log.h"

namespace gpuslice::mock {
namespace {

bool parse_u64(std::string_view text, std::uint64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    std::uint64_t digit = static_cast<std::uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return false;
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

bool read_u64(const char* name, std::uint64_t* out) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return true;  // keep the default
  if (!parse_u64(value, out)) {
    MOCK_LOG("%s=%s is not a plain unsigned integer", name, value);
    return false;
  }
  return true;
}

// Either one byte count for every device or "0=bytes,1=bytes"; unnamed devices keep the default.
bool read_memory(MockConfig* config) {
  const char* value = std::getenv("GPUSLICE_MOCK_MEMORY");
  if (value == nullptr || *value == '\0') return true;
  std::string_view text(value);
  if (text.find('=') == std::string_view::npos) {
    std::uint64_t bytes = 0;
    if (!parse_u64(text, &bytes) || bytes == 0) {
      MOCK_LOG("GPUSLICE_MOCK_MEMORY=%s: expected bytes or 0=bytes,1=bytes", value);
      return false;
    }
    for (auto& total : config->total_bytes) total = bytes;
    return true;
  }
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    std::size_t equals = item.find('=');
    std::uint64_t index = 0;
    std::uint64_t bytes = 0;
    if (equals == std::string_view::npos || !parse_u64(item.substr(0, equals), &index) ||
        !parse_u64(item.substr(equals + 1), &bytes) || index >= kMaxDevices || bytes == 0) {
      MOCK_LOG("GPUSLICE_MOCK_MEMORY=%s: bad item '%.*s'", value, static_cast<int>(item.size()), item.data());
      return false;
    }
    config->total_bytes[index] = bytes;
  }
  return true;
}

bool read_uuids(MockConfig* config) {
  const char* value = std::getenv("GPUSLICE_MOCK_UUIDS");
  if (value == nullptr || *value == '\0') return true;
  std::string_view text(value);
  unsigned index = 0;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    char candidate[kUuidLength] = {};
    if (index >= kMaxDevices || item.size() >= kUuidLength) {
      MOCK_LOG("GPUSLICE_MOCK_UUIDS=%s: too many or too long entries", value);
      return false;
    }
    std::memcpy(candidate, item.data(), item.size());
    if (!is_valid_uuid(candidate)) {
      MOCK_LOG("GPUSLICE_MOCK_UUIDS=%s: '%s' is not GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", value,
               candidate);
      return false;
    }
    for (unsigned other = 0; other < index; ++other) {
      if (strcasecmp(config->uuid[other], candidate) == 0) {
        MOCK_LOG("GPUSLICE_MOCK_UUIDS=%s: duplicate '%s'", value, candidate);
        return false;
      }
    }
    std::memcpy(config->uuid[index], candidate, kUuidLength);
    ++index;
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void default_uuid(unsigned index, char (&out)[kUuidLength]) {
  std::snprintf(out, kUuidLength, "GPU-6d6f636b-0000-4000-8000-%012x", index);
}

bool is_valid_uuid(const char* text) {
  static constexpr std::string_view kPattern = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  std::string_view candidate(text);
  if (candidate.size() != kPattern.size()) return false;
  for (std::size_t i = 0; i < kPattern.size(); ++i) {
    if (kPattern[i] == 'x') {
      if (hex_value(candidate[i]) < 0) return false;
    } else if (candidate[i] != kPattern[i]) {
      return false;
    }
  }
  return true;
}

void uuid_bytes(const char* text, unsigned char (&out)[16]) {
  unsigned produced = 0;
  int high = -1;
  for (const char* p = text + 4; *p != '\0' && produced < 16; ++p) {
    int nibble = hex_value(*p);
    if (nibble < 0) continue;
    if (high < 0) {
      high = nibble;
    } else {
      out[produced++] = static_cast<unsigned char>((high << 4) | nibble);
      high = -1;
    }
  }
}

namespace {

// "0=8192M,1=4G": the pinned-memory limit per ordinal, units G, M, K binary (as gpuslice writes
// them). A malformed value is refused as the real client refuses to start.
bool parse_pinned(const char* text, MockConfig* config) {
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::size_t equals = item.find('=');
    if (equals == std::string_view::npos || equals == 0) return false;
    unsigned long ordinal = 0;
    for (const char c : item.substr(0, equals)) {
      if (c < '0' || c > '9') return false;
      ordinal = ordinal * 10 + static_cast<unsigned long>(c - '0');
    }
    std::string_view size = item.substr(equals + 1);
    std::uint64_t unit = 1;
    if (!size.empty()) {
      const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(size.back())));
      unit = u == 'G' ? (1ULL << 30) : u == 'M' ? (1ULL << 20) : u == 'K' ? 1024ULL : 1ULL;
      if (unit != 1) size.remove_suffix(1);
    }
    std::uint64_t value = 0;
    if (size.empty() || size.size() > 12) return false;
    for (const char c : size) {
      if (c < '0' || c > '9') return false;
      value = value * 10 + static_cast<std::uint64_t>(c - '0');
    }
    if (ordinal < kMaxDevices) config->mps_pinned_limit[ordinal] = value * unit;
  }
  return true;
}

void copy_env(const char* name, char* out, std::size_t size) {
  const char* value = std::getenv(name);
  if (value != nullptr) std::snprintf(out, size, "%s", value);
}

// Whether the client connects to an MPS control daemon, and what it read then.
bool load_mps(MockConfig* config) {
  const char* pipe = std::getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (pipe == nullptr || *pipe == '\0') return true;
  char control[600];
  std::snprintf(control, sizeof control, "%s/control", pipe);
  if (access(control, F_OK) != 0) return true;  // no daemon there: the driver runs without MPS
  config->mps = true;
  std::snprintf(config->mps_pipe_dir, sizeof config->mps_pipe_dir, "%s", pipe);
  copy_env("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", config->mps_pinned_text, sizeof config->mps_pinned_text);
  copy_env("CUDA_MPS_CLIENT_PRIORITY", config->mps_priority, sizeof config->mps_priority);
  copy_env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", config->mps_threads, sizeof config->mps_threads);
  if (config->mps_threads[0] != '\0') {
    char* end = nullptr;
    const unsigned long share = std::strtoul(config->mps_threads, &end, 10);
    if (end == config->mps_threads || *end != '\0' || share < 1 || share > 100) {
      MOCK_LOG("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%s: malformed", config->mps_threads);
      return false;
    }
    config->mps_thread_share = static_cast<unsigned>(share);
  }
  if (config->mps_pinned_text[0] != '\0' && !parse_pinned(config->mps_pinned_text, config)) {
    MOCK_LOG("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s: malformed", config->mps_pinned_text);
    return false;
  }
  return true;
}

}  // namespace

bool load_config(MockConfig* config) {
  *config = MockConfig{};
  for (auto& total : config->total_bytes) total = kDefaultMemoryBytes;
  for (unsigned i = 0; i < kMaxDevices; ++i) default_uuid(i, config->uuid[i]);

  std::uint64_t devices = config->device_count;
  if (!read_u64("GPUSLICE_MOCK_DEVICES", &devices)) return false;
  if (devices > kMaxDevices) {
    MOCK_LOG("GPUSLICE_MOCK_DEVICES=%llu: at most %u devices", static_cast<unsigned long long>(devices),
             kMaxDevices);
    return false;
  }
  config->device_count = static_cast<unsigned>(devices);
  if (!read_memory(config) || !read_uuids(config)) return false;
  if (!read_u64("GPUSLICE_MOCK_CONTEXT_BYTES", &config->context_bytes)) return false;
  if (!read_u64("GPUSLICE_MOCK_FURTHER_CONTEXT_BYTES", &config->further_context_bytes)) return false;
  if (config->further_context_bytes == ~0ULL) config->further_context_bytes = config->context_bytes;
  if (!read_u64("GPUSLICE_MOCK_FIRST_LAUNCH_BYTES", &config->first_launch_bytes)) return false;
  if (!read_u64("GPUSLICE_MOCK_KERNEL_NS", &config->kernel_ns)) return false;
  if (!read_u64("GPUSLICE_MOCK_DTOD_BYTES_PER_S", &config->dtod_bytes_per_s)) return false;
  if (!read_u64("GPUSLICE_MOCK_HOST_PIN_BYTES_PER_S", &config->host_pin_bytes_per_s)) return false;
  if (!read_u64("GPUSLICE_MOCK_SM_COUNT", &config->sm_count)) return false;
  if (!read_u64("GPUSLICE_MOCK_THREADS_PER_SM", &config->threads_per_sm)) return false;
  if (config->sm_count == 0 || config->sm_count > 4096 || config->threads_per_sm == 0 ||
      config->threads_per_sm > 65536) {
    MOCK_LOG("GPUSLICE_MOCK_SM_COUNT / _THREADS_PER_SM: 1-4096 / 1-65536");
    return false;
  }
  if (!read_u64("GPUSLICE_MOCK_QUEUE_DEPTH", &config->queue_depth)) return false;
  if (config->queue_depth > kMaxQueueDepth) {
    MOCK_LOG("GPUSLICE_MOCK_QUEUE_DEPTH: at most %llu", static_cast<unsigned long long>(kMaxQueueDepth));
    return false;
  }
  if (!read_u64("GPUSLICE_MOCK_FAKE_CLOCK", &config->fake_clock_start_ns)) return false;
  if (!read_u64("GPUSLICE_MOCK_NVML_PID_OFFSET", &config->nvml_pid_offset)) return false;
  if (config->nvml_pid_offset > (1u << 30)) {
    MOCK_LOG("GPUSLICE_MOCK_NVML_PID_OFFSET=%llu: at most 2^30",
             static_cast<unsigned long long>(config->nvml_pid_offset));
    return false;
  }
  if (const char* nvml_version = std::getenv("GPUSLICE_MOCK_NVML_DRIVER_VERSION");
      nvml_version != nullptr && *nvml_version != '\0') {
    const std::size_t length = std::strlen(nvml_version);
    bool plain = length < sizeof config->nvml_driver_version;
    for (std::size_t i = 0; plain && i < length; ++i)
      plain = std::isgraph(static_cast<unsigned char>(nvml_version[i]));
    if (!plain) {
      MOCK_LOG("GPUSLICE_MOCK_NVML_DRIVER_VERSION=%s: expected up to %zu printable characters", nvml_version,
               sizeof config->nvml_driver_version - 1);
      return false;
    }
    std::memcpy(config->nvml_driver_version, nvml_version, length + 1);
  }
  if (const char* capturing = std::getenv("GPUSLICE_MOCK_CAPTURING");
      capturing != nullptr && *capturing != '\0') {
    if (std::strcmp(capturing, "per-thread") != 0) {
      MOCK_LOG("GPUSLICE_MOCK_CAPTURING=%s: expected per-thread", capturing);
      return false;
    }
    config->per_thread_capturing = true;
  }
  std::uint64_t driver_version = static_cast<std::uint64_t>(config->driver_version);
  if (!read_u64("GPUSLICE_MOCK_DRIVER_VERSION", &driver_version)) return false;
  if (driver_version < 2000 || driver_version > 99990) {
    MOCK_LOG("GPUSLICE_MOCK_DRIVER_VERSION=%llu is not a CUDA version like 13000",
             static_cast<unsigned long long>(driver_version));
    return false;
  }
  config->driver_version = static_cast<int>(driver_version);

  const char* dir = std::getenv("GPUSLICE_MOCK_STATE_DIR");
  int written = (dir != nullptr && *dir != '\0')
                    ? std::snprintf(config->state_dir, sizeof(config->state_dir), "%s", dir)
                    : std::snprintf(config->state_dir, sizeof(config->state_dir), "/tmp/gpuslice-mock-%u",
                                    static_cast<unsigned>(getuid()));
  if (written <= 0 || static_cast<std::size_t>(written) >= sizeof(config->state_dir)) {
    MOCK_LOG("GPUSLICE_MOCK_STATE_DIR is too long");
    return false;
  }
  return load_mps(config);
}

}  // namespace gpuslice::mock
