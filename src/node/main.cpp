// gpuslice-node: `serve` (DaemonSet: NVML, /metrics, HTTP API, device plugin), `dra` (the DRA
// kubelet plugin instead of the device plugin), `webhook` (admission webhook) and `index` (a shared
// node directory's writer index, plain hosts), each a mode over
// the one start-up of startup/run_mode.h. Invoked as gpuslice-webhook it runs the webhook.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "node/channel/index_mode.h"
#include "node/dra_mode.h"
#include "node/serve_mode.h"
#include "node/startup/run_mode.h"
#include "node/webhook_mode.h"

namespace gs = gpuslice::node;

namespace {

const char* lookup_env(const char* name) { return std::getenv(name); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string program = argv[0];
  program = program.substr(program.rfind('/') + 1);
  if (program == "gpuslice-webhook") return gs::run_webhook_mode(args, lookup_env);

  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(gs::usage_main().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "serve") return gs::run_serve_mode(args, lookup_env);
  if (command == "webhook") return gs::run_webhook_mode(args, lookup_env);
  if (command == "dra") return gs::dra::run_dra_mode(args, lookup_env);
  if (command == "index") return gs::run_index_mode(args, lookup_env);
  if (command == "version" || command == "--version") {
    std::printf("gpuslice-node %s\n", GPUSLICE_VERSION);
    return 0;
  }
  std::fprintf(stderr, "gpuslice-node: unknown command '%s'\n\n%s", command.c_str(),
               gs::usage_main().c_str());
  return 2;
}
