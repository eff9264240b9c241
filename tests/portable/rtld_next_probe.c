// Checks that libgpuslice.so's dlsym keeps RTLD_NEXT relative to its caller: asked from this
// program for the next "dlsym", glibc must answer with the first definition after the program,
// the preloaded library's own override. An override that called glibc itself would make the
// lookup relative to libgpuslice.so and answer with libc's (or libdl's) dlsym.
// Prints rtld_next_dlsym_object=<file that defines the answer>.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(void) {
  void* next = dlsym(RTLD_NEXT, "dlsym");
  Dl_info info;
  if (next == NULL || dladdr(next, &info) == 0 || info.dli_fname == NULL) {
    printf("rtld_next_dlsym_object=none\n");
    return 1;
  }
  printf("rtld_next_dlsym_object=%s\n", info.dli_fname);
  return 0;
}
