// Reads every variable of docs/configuration.md and resolves precedence between gpuslice and the systems it
// replaces. Each malformed variable adds exactly one message; nothing here decides what to do
// about them (the interposer fails closed on any).
#include "config/settings.h"

#include <unistd.h>  // environ

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "common/text.h"
#include "config/default_paths.h"
#include "config/parse_internal.h"
#include "config/text_util.h"

namespace gpuslice::config {

namespace {

// HAMi-core's per-device variables (CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT_<i>) are
// probed by name for every ordinal, since an EnvLookup cannot list the environment; the names the
// caller could list are checked for suffixes that are no ordinal.
constexpr const char* kHamiPerDevice[] = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT"};

// True for "0".."63": the canonical decimal form of an ordinal below kMaxCudaDevices.
bool is_device_ordinal(std::string_view text) {
  if (text.empty() || text.size() > 2 || (text.size() > 1 && text.front() == '0')) return false;
  int value = 0;
  for (char c : text) {
    if (!detail::is_digit(c)) return false;
    value = value * 10 + (c - '0');
  }
  return value < kMaxCudaDevices;
}

class Loader {
 public:
  Loader(const EnvLookup& getenv_fn, Settings& settings) : getenv_(getenv_fn), settings_(settings) {}

  // NAME_<suffix> variables of HAMi-core whose suffix names no device ordinal would otherwise be
  // ignored, leaving that device unlimited: each is an error naming the variable.
  void check_per_device_names(const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      for (const char* base : kHamiPerDevice) {
        const std::size_t length = std::strlen(base);
        if (name.size() <= length || name.compare(0, length, base) != 0 || name[length] != '_') continue;
        const std::string_view suffix = std::string_view(name).substr(length + 1);
        auto value = get(name.c_str());
        if (!value || is_device_ordinal(suffix)) continue;  // an empty variable counts as unset
        fail(name, *value,
             "'" + detail::printable(suffix, 32) + "' is not a device index (0-" +
                 std::to_string(kMaxCudaDevices - 1) + ", no leading zeros)");
      }
    }
  }

  // The variable's value; an empty value counts as unset.
  std::optional<std::string_view> get(const char* name) const {
    const char* value = getenv_ ? getenv_(name) : nullptr;
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string_view(value);
  }

  void fail(std::string_view name, std::string_view value, std::string_view why) {
    settings_.errors.push_back(detail::variable_error(name, value, why));
  }

  // GPUSLICE_MEMORY_LIMIT / GPUSLICE_COMPUTE_LIMIT: any of the three forms.
  void note_ordinals(const char* name, std::string_view text, const DeviceValues& values) {
    for (const auto& [index, unused] : values.by_index)
      settings_.named_ordinals.push_back({name, std::string(text), index});
  }

  // A per-device variable as parsed: its values (their ordinals noted), or none and an error.
  DeviceValues accepted(const char* name, std::string_view text, Result<DeviceValues> parsed) {
    if (!parsed) {
      fail(name, text, parsed.error());
      return {};
    }
    note_ordinals(name, text, *parsed);
    return std::move(parsed).value();
  }

  DeviceValues device_values(const char* name, ValueKind kind, SizeDialect dialect) {
    auto text = get(name);
    if (!text) return {};
    return accepted(name, *text, parse_device_values(*text, kind, dialect));
  }

  // TENSOR_FUSION_*: JSON objects only, values in bytes / percent.
  DeviceValues json_values(const char* name, ValueKind kind) {
    auto text = get(name);
    if (!text) return {};
    if (text->size() > detail::kMaxValueBytes) {
      fail(name, *text, "value longer than 65536 bytes");
      return {};
    }
    return accepted(name, *text, parse_json_device_values(*text, kind, SizeDialect::Bytes));
  }

  // HCS_VRAM_QUOTA, VCUDA_MEMORY_LIMIT: one size for every device.
  DeviceValues single_size(const char* name, SizeDialect dialect) {
    DeviceValues values;
    auto text = get(name);
    if (!text) return values;
    auto size = parse_size(*text, dialect);
    if (size) {
      values.all = *size;
    } else {
      fail(name, *text, size.error());
    }
    return values;
  }

  // HAMi-core: NAME_<i> per device over NAME for all; as in HAMi-core, 0 means "not set here".
  DeviceValues hami_values(const char* name, ValueKind kind) {
    DeviceValues values;
    auto parse = [&](const char* variable, std::optional<std::uint64_t>& out) {
      auto text = get(variable);
      if (!text) return;
      if (kind == ValueKind::Size) {
        auto size = detail::parse_size_value(*text, SizeDialect::Hami, /*allow_zero=*/true);
        if (!size) return fail(variable, *text, size.error());
        if (*size > 0) out = *size;
      } else {
        auto percent = detail::parse_percent_value(*text, /*allow_zero=*/true);
        if (!percent) return fail(variable, *text, percent.error());
        if (*percent > 0) out = *percent;
      }
    };
    char variable[96];
    for (int i = 0; i < kMaxCudaDevices; ++i) {
      std::snprintf(variable, sizeof variable, "%s_%d", name, i);
      std::optional<std::uint64_t> value;
      parse(variable, value);
      if (!value) continue;
      values.by_index.emplace_back(i, *value);
      settings_.named_ordinals.push_back({variable, std::string(get(variable).value_or("")), i});
    }
    parse(name, values.all);
    return values;
  }

  void load_limits() {
    DeviceValues memory = device_values("GPUSLICE_MEMORY_LIMIT", ValueKind::Size, SizeDialect::Native);
    memory =
        merge_by_precedence(std::move(memory), json_values("TENSOR_FUSION_CUDA_MEM_LIMIT", ValueKind::Size));
    memory = merge_by_precedence(std::move(memory), hami_values("CUDA_DEVICE_MEMORY_LIMIT", ValueKind::Size));
    memory = merge_by_precedence(std::move(memory), single_size("HCS_VRAM_QUOTA", SizeDialect::Hcs));
    memory = merge_by_precedence(std::move(memory), single_size("VCUDA_MEMORY_LIMIT", SizeDialect::Bytes));
    settings_.memory = std::move(memory);
    load_guarantee(settings_.memory);
    if (auto text = get("GPUSLICE_RECLAIM_DEADLINE")) {
      auto parsed = parse_duration_ns(*text, 1'000, 600'000'000'000);
      if (!parsed) {
        fail("GPUSLICE_RECLAIM_DEADLINE", *text, parsed.error());
      } else {
        settings_.reclaim_deadline_ns = *parsed;
      }
    }

    DeviceValues compute = device_values("GPUSLICE_COMPUTE_LIMIT", ValueKind::Percent, SizeDialect::Native);
    compute = merge_by_precedence(std::move(compute),
                                  json_values("TENSOR_FUSION_CUDA_UP_LIMIT", ValueKind::Percent));
    compute =
        merge_by_precedence(std::move(compute), hami_values("CUDA_DEVICE_SM_LIMIT", ValueKind::Percent));
    settings_.compute = std::move(compute);
  }

  // GPUSLICE_MEMORY_GUARANTEE, in the grammar of GPUSLICE_MEMORY_LIMIT; never above the memory
  // limit (`limit`, every dialect merged) for any device either names. The compatibility dialects
  // have no guarantee.
  void load_guarantee(const DeviceValues& limit) {
    const char* name = "GPUSLICE_MEMORY_GUARANTEE";
    settings_.guarantee = device_values(name, ValueKind::Size, SizeDialect::Native);
    if (settings_.guarantee.empty()) return;
    if (auto where = guarantee_above_limit(settings_.guarantee, limit)) {
      auto native = get("GPUSLICE_MEMORY_LIMIT");
      const std::string limit_name = native ? "GPUSLICE_MEMORY_LIMIT='" + detail::printable(*native) + "'"
                                            : std::string("the memory limit of the compatibility variables");
      fail(name, *get(name), "above " + limit_name + " on " + *where + " (a guarantee is at most the limit)");
      settings_.guarantee = {};
    }
  }

  // Every level variable is checked, even one a higher-precedence variable overrides.
  void load_log_level() {
    struct Source {
      const char* name;
      Result<log::Level> (*parse)(std::string_view);
    };
    static constexpr Source kSources[] = {
        {"GPUSLICE_LOG_LEVEL", parse_log_level},
        {"HCS_LOG_LEVEL", parse_log_level},
        {"LIBCUDA_LOG_LEVEL", parse_libcuda_log_level},
        {"VCUDA_LOG_LEVEL", parse_log_level},
    };
    bool chosen = false;
    for (const Source& source : kSources) {
      auto text = get(source.name);
      if (!text) continue;
      auto level = source.parse(*text);
      if (!level) {
        fail(source.name, *text, level.error());
      } else if (!chosen) {
        settings_.log_level = *level;
        chosen = true;
      }
    }
  }

  // A path variable: absolute where `absolute` (processes in other directories must agree on it).
  std::optional<std::string_view> path(const char* name, bool absolute) {
    auto text = get(name);
    if (!text) return std::nullopt;
    if (text->size() >= PATH_MAX) {
      fail(name, *text, "path longer than PATH_MAX");
      return std::nullopt;
    }
    if (absolute && text->front() != '/') {
      fail(name, *text, "must be an absolute path");
      return std::nullopt;
    }
    return text;
  }

  void load_priority() {
    auto text = get("GPUSLICE_PRIORITY");
    if (!text) return;
    auto parsed = parse_priority(*text);
    if (!parsed) return fail("GPUSLICE_PRIORITY", *text, parsed.error());
    settings_.priority = *parsed;
  }

  // Read whether or not GPUSLICE_PRIORITY is set: `gpuslice set --priority` may give the
  // container a level later, and a malformed value must fail closed either way.
  void load_priority_tuning() {
    PriorityTunables& t = settings_.priority_tuning;
    const auto duration = [this](const char* name, std::uint64_t min_ns, std::uint64_t max_ns,
                                 std::optional<std::uint64_t>& out) {
      auto text = get(name);
      if (!text) return;
      auto parsed = parse_duration_ns(*text, min_ns, max_ns);
      if (!parsed) return fail(name, *text, parsed.error());
      out = *parsed;
    };
    duration("GPUSLICE_PRIORITY_IN_FLIGHT", 100'000, 100'000'000, t.in_flight_ns);
    duration("GPUSLICE_PRIORITY_RAMP", 0, 1'000'000'000, t.ramp_ns);
    duration("GPUSLICE_PRIORITY_GRACE", 0, 10'000'000, t.grace_ns);
    duration("GPUSLICE_PRIORITY_REFRESH", 20'000, 10'000'000, t.refresh_ns);
    if (auto text = get("GPUSLICE_PRIORITY_FLOOR")) {
      auto percent = detail::parse_percent_value(*text, /*allow_zero=*/true);
      if (!percent) return fail("GPUSLICE_PRIORITY_FLOOR", *text, percent.error());
      t.floor_percent = *percent;
    }
    if (auto text = get("GPUSLICE_PRIORITY_LIGHT_SHARE")) {
      auto percent = detail::parse_percent_value(*text, /*allow_zero=*/true);
      if (!percent) return fail("GPUSLICE_PRIORITY_LIGHT_SHARE", *text, percent.error());
      t.light_share_percent = *percent;
    }
    if (auto text = get("GPUSLICE_PRIORITY_REQUEST_SHARE")) {
      auto percent = detail::parse_percent_value(*text, /*allow_zero=*/true);
      if (!percent) return fail("GPUSLICE_PRIORITY_REQUEST_SHARE", *text, percent.error());
      t.request_share_percent = *percent;
    }
    // One of two words: the first sets `out`, the second clears it; anything else is `why`.
    const auto either = [this](const char* name, std::string_view on, std::string_view off,
                               std::string_view why, std::optional<bool>& out) {
      auto text = get(name);
      if (!text) return;
      if (*text == on) {
        out = true;
      } else if (*text == off) {
        out = false;
      } else {
        fail(name, *text, why);
      }
    };
    either("GPUSLICE_PRIORITY_COST", "kernel", "average", "expected kernel or average", t.per_kernel_cost);
    either("GPUSLICE_PRIORITY_LONG_KERNEL", "alone", "queued", "expected alone or queued",
           t.long_kernels_alone);
  }

  void load_compute_busy() {
    auto text = get("GPUSLICE_COMPUTE_BUSY");
    if (!text) return;
    if (*text == "events") {
      settings_.compute_busy_events = true;
    } else if (*text == "launches") {
      settings_.compute_busy_events = false;
    } else {
      fail("GPUSLICE_COMPUTE_BUSY", *text, "expected events or launches");
    }
  }

  void load_paths() {
    settings_.shared_dir = default_shared_dir();
    auto shared_dir = path("GPUSLICE_SHARED_DIR", /*absolute=*/true);
    auto hami_cache = path("CUDA_DEVICE_MEMORY_SHARED_CACHE", /*absolute=*/true);
    if (hami_cache && hami_cache->back() == '/') {
      fail("CUDA_DEVICE_MEMORY_SHARED_CACHE", *hami_cache, "names a directory, expected a file");
      hami_cache.reset();
    }
    if (shared_dir) {
      std::string_view dir = *shared_dir;
      while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
      settings_.shared_dir = dir;
    } else if (hami_cache && !get("GPUSLICE_SHARED_DIR")) {
      settings_.shared_file = *hami_cache;
      const std::size_t slash = hami_cache->rfind('/');
      settings_.shared_dir = slash == 0 ? std::string("/") : std::string(hami_cache->substr(0, slash));
    }
    if (settings_.shared_file.empty()) {
      settings_.shared_file = settings_.shared_dir;
      if (settings_.shared_file.back() != '/') settings_.shared_file += '/';
      settings_.shared_file += kStateFileName;
    }

    auto profile_dir = path("GPUSLICE_PROFILE_DIR", /*absolute=*/false);
    auto pflog = path("PFLOG", /*absolute=*/false);
    if (profile_dir) {
      settings_.profile_dir = *profile_dir;
    } else if (pflog) {
      settings_.profile_dir = *pflog;
    }

    auto limits_file = path("GPUSLICE_LIMITS_FILE", /*absolute=*/false);
    settings_.limits_file = limits_file ? *limits_file : kDefaultLimitsFile;
    if (auto required = get("GPUSLICE_LIMITS_REQUIRED")) {
      if (*required == "1") {
        settings_.limits_file_required = true;
      } else if (*required != "0" && !required->empty()) {
        fail("GPUSLICE_LIMITS_REQUIRED", *required, "expected 1 or 0");
      }
    }
    auto node_dir = path("GPUSLICE_NODE_DIR", /*absolute=*/false);
    settings_.node_dir = node_dir ? *node_dir : default_node_dir();
    settings_.node_dir_private = !node_dir;
    if (auto writer = get("GPUSLICE_NODE_WRITER")) {
      // One file name: the device plugin sets it to the container's own directory.
      if (text::is_plain_name(*writer)) {
        settings_.node_writer = *writer;
      } else {
        fail("GPUSLICE_NODE_WRITER", *writer, "expected one file name of letters, digits, '-', '_' and '.'");
      }
    }
    if (auto visible = get("CUDA_VISIBLE_DEVICES")) settings_.visible_devices = *visible;
  }

  // GPUSLICE_MPS, and the MPS variables the driver reads, as the client's environment has them
  // (the interposer derives them from the limits before the driver starts: mps_client.h).
  void load_mps() {
    if (auto text = get("GPUSLICE_MPS")) {
      if (*text == "wait") {
        settings_.mps_policy = MpsPolicy::Wait;
      } else if (*text == "fallback") {
        settings_.mps_policy = MpsPolicy::Fallback;
      } else if (*text == "error") {
        settings_.mps_policy = MpsPolicy::Error;
      } else {
        fail("GPUSLICE_MPS", *text, "expected wait, fallback or error");
      }
    }
    const auto keep = [this](const char* name, std::optional<std::string>& out) {
      if (auto text = get(name)) out = std::string(*text);
    };
    keep(kMpsPipeDirVar, settings_.mps_pipe_dir);
    keep(kMpsPinnedLimitVar, settings_.mps_pinned);
    keep(kMpsClientPriorityVar, settings_.mps_priority);
    keep(kMpsThreadPercentVar, settings_.mps_threads);
    settings_.visible_devices_set = get("CUDA_VISIBLE_DEVICES").has_value();
  }

 private:
  const EnvLookup& getenv_;
  Settings& settings_;
};

}  // namespace

Settings load_settings(const EnvLookup& getenv_fn, const std::vector<std::string>& names) {
  Settings settings;
  Loader loader(getenv_fn, settings);
  loader.check_per_device_names(names);
  loader.load_limits();
  loader.load_log_level();
  loader.load_paths();
  loader.load_priority();
  loader.load_priority_tuning();
  loader.load_compute_busy();
  loader.load_mps();
  return settings;
}

Settings load_settings_from_environment() {
  std::vector<std::string> names;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const char* equals = std::strchr(*entry, '=');
    if (equals == nullptr) continue;
    for (const char* base : kHamiPerDevice) {
      if (std::strncmp(*entry, base, std::strlen(base)) == 0)
        names.emplace_back(*entry, static_cast<std::size_t>(equals - *entry));
    }
  }
  return load_settings([](const char* name) -> const char* { return std::getenv(name); }, names);
}

}  // namespace gpuslice::config
