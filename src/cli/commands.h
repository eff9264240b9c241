// One entry point per gpuslice command; argv[0] is the command's name. Each returns the process
// exit status (0 ok, 1 runtime error, 2 usage error; `run` passes its command's status through).
#pragma once

namespace gpuslice::cli {

int cmd_run(int argc, char** argv);
int cmd_status(int argc, char** argv);
int cmd_top(int argc, char** argv);
int cmd_set(int argc, char** argv);
int cmd_profile(int argc, char** argv);
int cmd_version(int argc, char** argv);
int cmd_mps(int argc, char** argv);

}  // namespace gpuslice::cli
