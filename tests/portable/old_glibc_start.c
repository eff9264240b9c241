// Start-up of the older-glibc stage's test executables (scripts/test-old-glibc.sh). This host's
// crt1.o calls __libc_start_main@GLIBC_2.34, which runs the program's constructors itself and is
// missing from older glibc. Linked with --wrap=__libc_start_main, the call comes here and goes to
// the old entry point (pinned by the forced glibc header), which expects the caller to pass the
// function that runs the constructors, as the old crt1.o did.
#include <stddef.h>

typedef int (*main_fn)(int, char**, char**);
typedef void (*init_fn)(int, char**, char**);

extern int __libc_start_main(main_fn main, int argc, char** argv, void (*init)(void), void (*fini)(void),
                             void (*rtld_fini)(void), void* stack_end);

// Bounds of the executable's constructor tables, defined by the linker.
extern init_fn __preinit_array_start[] __attribute__((visibility("hidden")));
extern init_fn __preinit_array_end[] __attribute__((visibility("hidden")));
extern init_fn __init_array_start[] __attribute__((visibility("hidden")));
extern init_fn __init_array_end[] __attribute__((visibility("hidden")));

static void run_constructors(int argc, char** argv, char** envp) {
  for (init_fn* f = __preinit_array_start; f < __preinit_array_end; ++f) (*f)(argc, argv, envp);
  for (init_fn* f = __init_array_start; f < __init_array_end; ++f) (*f)(argc, argv, envp);
}

__attribute__((visibility("hidden"))) int __wrap___libc_start_main(main_fn main, int argc, char** argv,
                                                                   void (*init)(void), void (*fini)(void),
                                                                   void (*rtld_fini)(void), void* stack_end) {
  if (init == NULL) init = (void (*)(void))run_constructors;
  return __libc_start_main(main, argc, argv, init, fini, rtld_fini, stack_end);
}
