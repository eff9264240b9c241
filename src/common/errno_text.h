// One way to describe an errno value in messages: "No such file or directory (ENOENT)".
#pragma once

#include <string>

namespace gpuslice::fs {

// The description and the symbolic name, e.g. "Permission denied (EACCES)". Thread-safe.
std::string errno_text(int err);

// Only the symbolic name ("EACCES"), or "E?" for an unknown value: for paths that must not allocate.
const char* errno_name(int err);

}  // namespace gpuslice::fs
