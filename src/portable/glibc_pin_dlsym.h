// dlsym's pin, kept out of glibc_pins_<arch>.h because libgpuslice.so defines its own dlsym (a
// .symver on a defined symbol would version the definition). Used by the older-glibc stage's test
// programs, which only call it.
#pragma once
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif
