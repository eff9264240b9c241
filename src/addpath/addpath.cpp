// libgpuslice-addpath.so (the vgpu.rs add-path helper, docs/addpath.md). Loaded with LD_PRELOAD, it edits
// PATH, LD_PRELOAD and LD_LIBRARY_PATH before the program's main runs:
//   TF_<X>=value          appends the entries of value to X
//   TF_PREPEND_<X>=value  prepends them
// Entries already present are skipped, so applying it again (a child process that inherits both
// the variables and LD_PRELOAD) changes nothing. The new values reach getenv() in this process and
// every program it executes; the dynamic loader of this process has already read LD_PRELOAD and
// LD_LIBRARY_PATH, so those two take effect in children only.
//
// Deliberately plain: no libstdc++ (linked as C), no exceptions, no exported symbols, and it never
// touches CUDA, so running as a constructor is safe.
#include <stdlib.h>
#include <string.h>

namespace {

struct PathVariable {
  const char* name;
  const char* append_from;
  const char* prepend_from;
  const char* separators;  // what the consumer of the variable treats as entry separators
};

// ld.so accepts spaces in LD_PRELOAD and semicolons in LD_LIBRARY_PATH as separators too.
constexpr PathVariable kVariables[] = {
    {"PATH", "TF_PATH", "TF_PREPEND_PATH", ":"},
    {"LD_PRELOAD", "TF_LD_PRELOAD", "TF_PREPEND_LD_PRELOAD", ": "},
    {"LD_LIBRARY_PATH", "TF_LD_LIBRARY_PATH", "TF_PREPEND_LD_LIBRARY_PATH", ":;"},
};

bool is_separator(char c, const char* separators) { return c != '\0' && strchr(separators, c) != nullptr; }

bool list_contains(const char* list, size_t list_length, const char* entry, size_t entry_length,
                   const char* separators) {
  size_t begin = 0;
  while (begin <= list_length) {
    size_t end = begin;
    while (end < list_length && !is_separator(list[end], separators)) ++end;
    if (end - begin == entry_length && memcmp(list + begin, entry, entry_length) == 0) return true;
    begin = end + 1;
  }
  return false;
}

struct Builder {
  char* text;
  size_t length;
};

void append_raw(Builder* out, const char* text, size_t length) {
  if (out->length > 0) out->text[out->length++] = ':';
  memcpy(out->text + out->length, text, length);
  out->length += length;
  out->text[out->length] = '\0';
}

// Adds each non-empty entry of `value` that is neither in `out` yet nor in `also_present`.
void add_entries(Builder* out, const char* value, const char* also_present, const char* separators) {
  const size_t also_length = also_present != nullptr ? strlen(also_present) : 0;
  for (const char* entry = value; *entry != '\0';) {
    size_t length = 0;
    while (entry[length] != '\0' && !is_separator(entry[length], separators)) ++length;
    if (length > 0 && !list_contains(out->text, out->length, entry, length, separators) &&
        (also_present == nullptr || !list_contains(also_present, also_length, entry, length, separators))) {
      append_raw(out, entry, length);
    }
    entry += length;
    if (*entry != '\0') ++entry;
  }
}

void apply(const PathVariable& variable) {
  const char* append = getenv(variable.append_from);
  const char* prepend = getenv(variable.prepend_from);
  if (append != nullptr && *append == '\0') append = nullptr;
  if (prepend != nullptr && *prepend == '\0') prepend = nullptr;
  if (append == nullptr && prepend == nullptr) return;

  const char* current = getenv(variable.name);
  const size_t capacity =
      (append ? strlen(append) : 0) + (prepend ? strlen(prepend) : 0) + (current ? strlen(current) : 0) + 4;
  Builder out{static_cast<char*>(malloc(capacity)), 0};
  if (out.text == nullptr) return;
  out.text[0] = '\0';
  if (prepend != nullptr) add_entries(&out, prepend, current, variable.separators);
  // The current value is kept verbatim: an empty entry in PATH means the working directory.
  if (current != nullptr && *current != '\0') append_raw(&out, current, strlen(current));
  if (append != nullptr) add_entries(&out, append, nullptr, variable.separators);

  const bool changed = current == nullptr ? out.length > 0 : strcmp(out.text, current) != 0;
  if (changed) setenv(variable.name, out.text, 1);
  free(out.text);
}

__attribute__((constructor)) void apply_all() {
  for (const PathVariable& variable : kVariables) apply(variable);
}

}  // namespace
