// An rtld-audit module: the loader loads it and calls la_version as soon as an object names it in
// DT_AUDIT or DT_DEPAUDIT and is the main program. It leaves a marker file, so a test sees whether
// anything ran it.
#include <fcntl.h>
#include <unistd.h>

extern "C" __attribute__((visibility("default"))) unsigned la_version(unsigned version) {
  int fd = open(GPUSLICE_TEST_AUDIT_MARKER, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) close(fd);
  return version;
}
