// The one grammar of the operator's assignment file, <node dir>/<writer>.assigned (node_channel.h
// reads it for every writer, the node daemon renders and parses it in node/assignment_file.*): both
// sides scan it with scan_assignment(), so a file means the same to the library and to the daemon.
// Allocation-free and exception-free: it is compiled into the injected library.
//
//   # allocation <resource> <sha256>   the device plugin's: which allocation the writer is (a comment
//                                      to the library); at most once
//   priority=<low|normal|high>         required, once: the writer's level (ceiling and default)
//   compute=<1-100>                    its compute share on every GPU (optional)
//   compute.<gpu uuid>=<1-100>         its share on that GPU, wins over compute= (once per GPU)
//   floor=<0-100>                      how far its containers' own GPUSLICE_PRIORITY_FLOOR may go
//   light-share=<0-100>                idem for GPUSLICE_PRIORITY_LIGHT_SHARE
//
// Blanks (spaces, tabs) around keys, '=' and values are allowed; '#' at the start of a line or
// after a blank starts a comment (so "priority=low   # batch jobs" is low); values are
// case-insensitive, keys are not. Anything else refuses the whole file: an unknown key, a
// malformed or repeated line, a missing priority line, a NUL byte, more than kMaxAssignmentBytes.
// The library then believes the writer at the lowest level with no share (fail closed) and says
// so; the daemon refuses to write such a file in the first place.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/priority.h"

namespace gpuslice::shm {

// An assignment file is a few short lines; a longer one is refused (writers check against it).
inline constexpr std::size_t kMaxAssignmentBytes = 1024;

// One meaningful line of an assignment file.
struct AssignmentLine {
  enum class Key { Allocation, Priority, Compute, ComputeGpu, Floor, LightShare };
  Key key = Key::Priority;
  Priority level = Priority::Normal;  // Priority
  unsigned percent = 0;               // Compute, ComputeGpu (1-100), Floor, LightShare (0-100)
  std::string_view gpu;               // ComputeGpu: the UUID as written
  std::string_view resource;          // Allocation
  std::string_view digest;            // Allocation: lower-case hexadecimal
};

// Why a file was refused: the 1-based line (0: the file as a whole) and a fixed text.
struct AssignmentSyntaxError {
  unsigned line = 0;
  const char* what = nullptr;
};

// Calls on_line(context, line) for each meaningful line in order, after the whole text was checked:
// nothing is reported from a file that is refused (false, with *error said).
bool scan_assignment(std::string_view text, void (*on_line)(void* context, const AssignmentLine& line),
                     void* context, AssignmentSyntaxError* error);

// A name that may follow "compute." and be a writer: letters, digits, '-', '_', '.', not starting
// with '.', at most 128 characters.
bool assignment_plain_name(std::string_view name);
// The resource of an allocation comment as the kubelet lists it ("gpuslice.io/cores"), and its
// devices' digest (lowercase hex, at most 128 characters).
bool assignment_resource_name(std::string_view name);
bool assignment_hex_digest(std::string_view digest);

// What the operator assigned one writer on one GPU, as the library believes it.
struct Assignment {
  enum class State { None, Believed, Refused };
  // None: no file (or one the operator did not write, which is ignored): normal at most, no turn,
  // no default level. Refused: the operator's file is unreadable or malformed: low, no turn.
  State state = State::None;
  Priority priority = Priority::Normal;  // the highest level its records are believed at
  unsigned compute_percent = 0;          // its compute share; 0 = none (it takes no turn)
  int floor_percent = -1;                // floor=; -1: not given (the built-in default caps it)
  int light_share_percent = -1;          // light-share=; -1: not given (light sharing off)
};

// The assignment `text` gives the GPU `uuid` (case-insensitive): Believed, or Refused (low, no
// share) with *error said when error is not null.
Assignment assignment_for_gpu(std::string_view text, std::string_view uuid,
                              AssignmentSyntaxError* error = nullptr);

}  // namespace gpuslice::shm
