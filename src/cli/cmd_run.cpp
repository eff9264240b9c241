// gpuslice run: put libgpuslice.so in front of LD_PRELOAD, set the limit variables and become the
// command (exec), so its exit status and signals are the command's own.
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/defaults.h"
#include "cli/format.h"
#include "cli/library_check.h"
#include "common/errno_text.h"
#include "config/settings.h"
#include "shared_state/ledger.h"

namespace gpuslice::cli {
namespace {

const CommandSpec& run_spec() {
  static const CommandSpec spec{
      "run",
      "[options] [--] COMMAND [ARGS...]",
      "Run COMMAND with libgpuslice.so preloaded and the given limits; exits with COMMAND's status.",
      "SIZE: 8Gi, 1.5GiB, 4G (decimal), 1024Mi, plain bytes. PCT: 1-100.\n"
      "--device-limits gives each device its own memory quota, keyed by CUDA index or GPU UUID:\n"
      "  gpuslice run --device-limits 0=8Gi,1=4Gi -- python train.py\n"
      "--compute accepts one percentage or the same per-device form (0=30,1=50).\n"
      "Processes started with the same --shared-dir share one quota per device: when processes of\n"
      "that container are running with another memory quota, run refuses (exit 1) and names the\n"
      "quota in force; change it with 'gpuslice set --memory SIZE' or use another --shared-dir.\n"
      "The library is looked up in: --library, $GPUSLICE_LIBRARY, ../lib/gpuslice/libgpuslice.so and\n"
      "../lib/libgpuslice.so next to this executable, /usr/local/lib/gpuslice/libgpuslice.so.\n"
      "It must be a shared library the dynamic loader preloads (this machine's, its dependencies\n"
      "found, at a path without spaces or ':'); otherwise run exits 1 and the command does not run.\n"
      "Exit status: COMMAND's; 127 if it is not found, 126 if it cannot be executed, 1 or 2 for\n"
      "gpuslice's own runtime or usage errors.",
      {
          {"--memory", "SIZE", "VRAM quota for every device (GPUSLICE_MEMORY_LIMIT)"},
          {"--device-limits", "LIST", "per-device VRAM quotas, e.g. 0=8Gi,1=4Gi"},
          {"--memory-guarantee", "SIZE|LIST",
           "VRAM promised to the container, at most the quota; one size or 0=2Gi,1=1Gi "
           "(GPUSLICE_MEMORY_GUARANTEE)"},
          {"--compute", "PCT", "share of the GPU's compute time, percent (GPUSLICE_COMPUTE_LIMIT)"},
          {"--priority", "LEVEL", "high, normal or low among containers sharing a GPU (GPUSLICE_PRIORITY)"},
          {"--shared-dir", "DIR", "container-wide state directory (GPUSLICE_SHARED_DIR)"},
          {"--library", "PATH", "libgpuslice.so to preload"},
          {"--log-level", "LEVEL", "error, warn, info, debug or trace (GPUSLICE_LOG_LEVEL)"},
          {"--profile-dir", "DIR", "write per-API profile files there (GPUSLICE_PROFILE_DIR)"},
      },
      /*stop_at_positional=*/true};
  return spec;
}

bool readable_file(const std::string& path) { return !path.empty() && access(path.c_str(), R_OK) == 0; }

// LD_PRELOAD wants a stable path: the loader resolves a relative one against each program's cwd.
std::string canonical(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : absolute_path(path);
}

std::string executable_dir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string exe(buf, static_cast<std::size_t>(n));
  std::size_t slash = exe.rfind('/');
  return slash == std::string::npos ? std::string() : exe.substr(0, slash);
}

// The library to preload, or an error listing where we looked.
Result<std::string> find_library(const ParsedArgs& args) {
  if (auto explicit_path = args.value("--library")) {
    if (!readable_file(*explicit_path))
      return make_error("library " + *explicit_path + " (--library) is not readable");
    return canonical(*explicit_path);
  }
  const char* from_env = getenv("GPUSLICE_LIBRARY");
  if (from_env != nullptr && *from_env != '\0') {
    if (!readable_file(from_env)) {
      return make_error(std::string("library ") + from_env + " ($GPUSLICE_LIBRARY) is not readable");
    }
    return canonical(from_env);
  }
  std::vector<std::string> candidates;
  std::string dir = executable_dir();
  if (!dir.empty()) {
    candidates.push_back(dir + "/../lib/gpuslice/" +
                         kLibraryFileName);                     // installed (cmake --install, packages)
    candidates.push_back(dir + "/../lib/" + kLibraryFileName);  // build tree
  }
  candidates.emplace_back(kDefaultLibrary);
  for (const std::string& candidate : candidates) {
    if (readable_file(candidate)) return canonical(candidate);
  }
  std::string tried;
  for (const std::string& candidate : candidates) tried += (tried.empty() ? "" : ", ") + candidate;
  return make_error("libgpuslice.so not found (tried " + tried +
                    "); pass --library PATH or set GPUSLICE_LIBRARY");
}

// Our library first, then the existing entries (separated by ':' or spaces) without a duplicate.
std::string preload_value(const std::string& library) {
  std::string result = library;
  const char* existing = getenv("LD_PRELOAD");
  if (existing == nullptr) return result;
  std::string entry;
  auto flush = [&] {
    if (!entry.empty() && entry != library) result += ":" + entry;
    entry.clear();
  };
  for (const char* p = existing; *p != '\0'; ++p) {
    if (*p == ':' || *p == ' ') {
      flush();
    } else {
      entry += *p;
    }
  }
  flush();
  return result;
}

// Processes of one state file share one quota per device, and a process never loosens the
// request of a record that exists. So a run whose --memory differs from the container's would
// silently get the container's quota (or tighten it for the others): refuse, saying what is in
// force and how to change it. A state file with no live process is nobody's: its request is
// replaced by this run's, so the command gets what it asked for.
Result<bool> check_container_quota(const std::string& state_file, const config::DeviceValues& wanted,
                                   const std::string& shown_flag) {
  if (access(state_file.c_str(), F_OK) != 0) return true;  // a fresh container
  auto opened = shm::Ledger::open(state_file, shm::Ledger::Mode::Observer);
  if (!opened) return make_error(opened.error());
  shm::Ledger& ledger = *opened.value();
  if (ledger.writable()) ledger.reap_dead();
  shm::Snapshot snap = ledger.snapshot();
  if (!snap.error.empty()) return make_error(snap.error);
  for (const shm::DeviceRow& row : snap.devices) {
    // A device this run sets no quota for does not join the container's record for memory.
    const auto wanted_here = wanted.lookup(row.index, row.uuid);
    if (!wanted_here || *wanted_here == row.requested.quota) continue;
    const std::uint64_t asked = *wanted_here;
    if (snap.processes.empty()) {
      if (ledger.writable()) ledger.set_quota(row.record, asked);
      continue;
    }
    std::string message =
        "the container of " + state_file + " already runs " + std::to_string(snap.processes.size()) +
        " process(es) with a memory quota of " + format_bytes(row.quota) + " on device " +
        std::to_string(row.record) + " (" + row.uuid + "); " + shown_flag + " asks for " +
        format_bytes(asked) +
        (asked > row.requested.quota ? ", which a process of the same container cannot get"
                                     : ", which would lower the quota of the processes already running") +
        ". Change the container's quota with 'gpuslice set --memory SIZE --shared-dir " +
        snap.path.substr(0, snap.path.rfind('/')) +
        "', or run with another --shared-dir for a quota of its own";
    if (row.cap.quota != shm::kUnlimited && asked > row.cap.quota)
      message += " (the container's read-only cap is " + format_bytes(row.cap.quota) + ")";
    return make_error(message);
  }
  return true;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const CommandSpec& spec = run_spec();
  ParsedArgs args;
  if (auto done = parse_command(spec, argc, argv, args)) return *done;
  if (args.positionals.empty())
    return usage_error(spec, "no command given (gpuslice run [options] -- COMMAND ...)");

  auto memory = args.value("--memory");
  auto device_limits = args.value("--device-limits");
  if (memory && device_limits) return usage_error(spec, "--memory and --device-limits cannot be combined");
  if (memory) {
    auto size = config::parse_size(*memory);
    if (!size) return usage_error(spec, "--memory '" + *memory + "': " + size.error());
  }
  if (device_limits) {
    if (device_limits->find('=') == std::string::npos && device_limits->find('{') == std::string::npos) {
      return usage_error(spec, "--device-limits '" + *device_limits +
                                   "' is not a per-device list (DEV=SIZE,...); use --memory for one size");
    }
    auto values =
        config::parse_device_values(*device_limits, config::ValueKind::Size, config::SizeDialect::Native);
    if (!values) return usage_error(spec, "--device-limits '" + *device_limits + "': " + values.error());
  }
  std::optional<config::DeviceValues> wanted_memory;
  if (memory || device_limits) {
    auto values = config::parse_device_values(memory ? *memory : *device_limits, config::ValueKind::Size,
                                              config::SizeDialect::Native);
    if (values) wanted_memory = std::move(values).value();
  }
  auto guarantee = args.value("--memory-guarantee");
  if (guarantee) {
    auto values =
        config::parse_device_values(*guarantee, config::ValueKind::Size, config::SizeDialect::Native);
    if (!values) return usage_error(spec, "--memory-guarantee '" + *guarantee + "': " + values.error());
    if (wanted_memory) {
      if (auto where = config::guarantee_above_limit(*values, *wanted_memory)) {
        const char* limit_flag = memory ? "--memory" : "--device-limits";
        return usage_error(spec, "--memory-guarantee '" + *guarantee + "' is above " + limit_flag + " '" +
                                     (memory ? *memory : *device_limits) + "' on " + *where +
                                     " (a guarantee is at most the quota)");
      }
    }
  }
  auto compute = args.value("--compute");
  if (compute) {
    auto values =
        config::parse_device_values(*compute, config::ValueKind::Percent, config::SizeDialect::Native);
    if (!values) return usage_error(spec, "--compute '" + *compute + "': " + values.error());
  }
  auto priority = args.value("--priority");
  if (priority) {
    auto level = config::parse_priority(*priority);
    if (!level) return usage_error(spec, "--priority '" + *priority + "': " + level.error());
  }
  auto log_level = args.value("--log-level");
  if (log_level) {
    auto level = config::parse_log_level(*log_level);
    if (!level) return usage_error(spec, "--log-level '" + *log_level + "': " + level.error());
  }

  auto library = find_library(args);
  if (!library) return runtime_error(spec.name, library.error());
  if (auto loadable = check_preloadable_library(*library); !loadable) {
    return runtime_error(spec.name, loadable.error());
  }

  if (wanted_memory) {
    auto state_file = resolve_state_file(args);
    if (!state_file) return runtime_error(spec.name, state_file.error());
    auto fits = check_container_quota(*state_file, *wanted_memory, memory ? "--memory" : "--device-limits");
    if (!fits) return runtime_error(spec.name, fits.error());
  }

  std::string preload = preload_value(*library);
  bool ok = setenv("LD_PRELOAD", preload.c_str(), 1) == 0;
  if (memory) ok = ok && setenv("GPUSLICE_MEMORY_LIMIT", memory->c_str(), 1) == 0;
  if (device_limits) ok = ok && setenv("GPUSLICE_MEMORY_LIMIT", device_limits->c_str(), 1) == 0;
  if (guarantee) ok = ok && setenv("GPUSLICE_MEMORY_GUARANTEE", guarantee->c_str(), 1) == 0;
  if (compute) ok = ok && setenv("GPUSLICE_COMPUTE_LIMIT", compute->c_str(), 1) == 0;
  if (priority) ok = ok && setenv("GPUSLICE_PRIORITY", priority->c_str(), 1) == 0;
  if (auto dir = args.value("--shared-dir")) {
    ok = ok && setenv("GPUSLICE_SHARED_DIR", absolute_path(*dir).c_str(), 1) == 0;
  }
  if (log_level) ok = ok && setenv("GPUSLICE_LOG_LEVEL", log_level->c_str(), 1) == 0;
  if (auto dir = args.value("--profile-dir")) {
    ok = ok && setenv("GPUSLICE_PROFILE_DIR", absolute_path(*dir).c_str(), 1) == 0;
  }
  if (!ok) return runtime_error(spec.name, "cannot set the environment: " + fs::errno_text(errno));

  std::vector<char*> command;
  for (const std::string& arg : args.positionals) command.push_back(const_cast<char*>(arg.c_str()));
  command.push_back(nullptr);
  std::fflush(nullptr);
  execvp(command[0], command.data());
  // Only reached when exec failed; follow the shells' convention for the status.
  int err = errno;
  std::fprintf(stderr, "gpuslice run: %s: %s\n", command[0],
               err == ENOENT ? "command not found" : fs::errno_text(err).c_str());
  return err == ENOENT ? 127 : 126;
}

}  // namespace gpuslice::cli
