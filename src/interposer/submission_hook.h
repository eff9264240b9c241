// A hook over an entry point that writes or reads device memory without launching a kernel (copies,
// memsets): it opens like every hook, then counts itself as a submission of a process that borrowed
// memory (reclaim_engine.h), so a move of borrowed memory to host memory and back holds it like a
// launch. A process that never borrowed pays one relaxed load for that.
#pragma once

#include "interposer/hook_prologue.h"
#include "interposer/reclaim/reclaim_engine.h"

// NOLINTBEGIN(cppcoreguidelines-macro-usage): one line per exported hook
#define GS_SUBMISSION_HOOK(sym, params, args)                       \
  GS_EXPORT CUresult sym params {                                   \
    GS_CUDA_HOOK_PROLOGUE(sym);                                     \
    ::gpuslice::interposer::reclaim::SubmissionScope gs_submission; \
    return real args;                                               \
  }
// NOLINTEND(cppcoreguidelines-macro-usage)
