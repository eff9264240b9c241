// gpuslice run: put libgpuslice.so in front of LD_PRELOAD, set the limit variables and become the
// command (exec), so its exit status and signals are the command's own.
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "config/settings.h"

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
      "Processes started with the same --shared-dir share one quota per device.\n"
      "The library is looked up in: --library, $GPUSLICE_LIBRARY, ../lib/libgpuslice.so next to this\n"
      "executable, /usr/local/lib/gpuslice/libgpuslice.so.\n"
      "Exit status: COMMAND's; 127 if it is not found, 126 if it cannot be executed, 1 or 2 for\n"
      "gpuslice's own runtime or usage errors.",
      {
          {"--memory", "SIZE", "VRAM quota for every device (GPUSLICE_MEMORY_LIMIT)"},
          {"--device-limits", "LIST", "per-device VRAM quotas, e.g. 0=8Gi,1=4Gi"},
          {"--compute", "PCT", "share of the GPU's compute time, percent (GPUSLICE_COMPUTE_LIMIT)"},
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
  if (!dir.empty()) candidates.push_back(dir + "/../lib/libgpuslice.so");
  candidates.emplace_back("/usr/local/lib/gpuslice/libgpuslice.so");
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
  auto compute = args.value("--compute");
  if (compute) {
    auto values =
        config::parse_device_values(*compute, config::ValueKind::Percent, config::SizeDialect::Native);
    if (!values) return usage_error(spec, "--compute '" + *compute + "': " + values.error());
  }
  auto log_level = args.value("--log-level");
  if (log_level) {
    auto level = config::parse_log_level(*log_level);
    if (!level) return usage_error(spec, "--log-level '" + *log_level + "': " + level.error());
  }

  auto library = find_library(args);
  if (!library) return runtime_error(spec.name, library.error());

  std::string preload = preload_value(*library);
  bool ok = setenv("LD_PRELOAD", preload.c_str(), 1) == 0;
  if (memory) ok = ok && setenv("GPUSLICE_MEMORY_LIMIT", memory->c_str(), 1) == 0;
  if (device_limits) ok = ok && setenv("GPUSLICE_MEMORY_LIMIT", device_limits->c_str(), 1) == 0;
  if (compute) ok = ok && setenv("GPUSLICE_COMPUTE_LIMIT", compute->c_str(), 1) == 0;
  if (auto dir = args.value("--shared-dir")) {
    ok = ok && setenv("GPUSLICE_SHARED_DIR", absolute_path(*dir).c_str(), 1) == 0;
  }
  if (log_level) ok = ok && setenv("GPUSLICE_LOG_LEVEL", log_level->c_str(), 1) == 0;
  if (auto dir = args.value("--profile-dir")) {
    ok = ok && setenv("GPUSLICE_PROFILE_DIR", absolute_path(*dir).c_str(), 1) == 0;
  }
  if (!ok)
    return runtime_error(spec.name, std::string("cannot set the environment: ") + std::strerror(errno));

  std::vector<char*> command;
  for (const std::string& arg : args.positionals) command.push_back(const_cast<char*>(arg.c_str()));
  command.push_back(nullptr);
  std::fflush(nullptr);
  execvp(command[0], command.data());
  // Only reached when exec failed; follow the shells' convention for the status.
  int err = errno;
  std::fprintf(stderr, "gpuslice run: %s: %s\n", command[0],
               err == ENOENT ? "command not found" : std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

}  // namespace gpuslice::cli
