/* End-to-end host test of rm_alloc_probe.so without a GPU (bench/gpu/rm_alloc_selftest.sh).
 * Built twice: with -DFAKE_RM_LIB it is libfake_rm.so, an ioctl() that answers like the RM for files named
 * nvidiactl / nvidia0 in the directory RM_PROBE_DEV_PREFIX names (allocations get handles, video memory
 * is rounded up to 2 MiB as the RM's page size would); without, it is the program, linked to libfake_rm.so,
 * that runs a client's life through libc's ioctl symbol while the probe is preloaded:
 *   exe -> rm_alloc_probe.so (preloaded) -> libfake_rm.so (RTLD_NEXT) -> libc. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rm_alloc_decode.h"

#define MIB (1ull << 20)

#ifdef FAKE_RM_LIB
static int is_fake_device(int fd) {
  char link[64], path[512];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  const char* prefix = getenv("RM_PROBE_DEV_PREFIX");
  if (n < 0 || prefix == NULL) return 0;
  path[n] = '\0';
  return strncmp(path, prefix, strlen(prefix)) == 0 && strncmp(path + strlen(prefix), "nvidia", 6) == 0;
}

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long request, ...) {
  va_list ap;
  va_start(ap, request);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  if (!is_fake_device(fd)) {
    int (*next)(int, unsigned long, ...) = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
    return next(fd, request, arg);
  }
  static uint32_t next_handle = 0x1000;
  const unsigned nr = request & 0xff, size = (request >> 16) & 0x3fff;
  if (nr == RMP_NV_ESC_RM_ALLOC && size == sizeof(struct rmp_nvos64)) {
    struct rmp_nvos64* a = arg;
    if (a->hObjectNew == 0) a->hObjectNew = next_handle++;
    if (a->hClass == 0) a->hClass = 0x41; /* the kernel forces NV01_ROOT_CLIENT */
    if (a->hClass == RMP_NV01_MEMORY_LOCAL_USER && a->pAllocParms != 0 &&
        a->paramsSize >= RMP_MEMPARAMS_MIN) {
      uint64_t bytes;
      memcpy(&bytes, (char*)(uintptr_t)a->pAllocParms + RMP_MEMPARAMS_OFF_SIZE, 8);
      bytes = (bytes + 2 * MIB - 1) & ~(2 * MIB - 1);
      memcpy((char*)(uintptr_t)a->pAllocParms + RMP_MEMPARAMS_OFF_SIZE, &bytes, 8);
    }
    a->status = 0;
  } else if (nr == RMP_NV_ESC_RM_FREE && size == sizeof(struct rmp_nvos00)) {
    ((struct rmp_nvos00*)arg)->status = 0;
  } else if (nr == RMP_NV_ESC_CHECK_VERSION_STR && size == RMP_VERSION_IOCTL_SIZE) {
    memcpy((char*)arg + 8, "580.95.05", 10); /* with its NUL */
  }
  return 0;
}
#else
static unsigned long req(unsigned nr, unsigned size) {
  return (3ul << 30) | ((unsigned long)size << 16) | ((unsigned long)'F' << 8) | nr;
}
extern int ioctl(int fd, unsigned long request, ...);

static uint32_t alloc(int ctl, uint32_t client, uint32_t parent, uint32_t cls, uint64_t bytes) {
  unsigned char params[128] = {0};
  memcpy(params + RMP_MEMPARAMS_OFF_SIZE, &bytes, 8);
  struct rmp_nvos64 a = {client, parent, 0, cls, bytes ? (uintptr_t)params : 0, 0, bytes ? 128 : 0, 0, 0, 0};
  if (ioctl(ctl, req(RMP_NV_ESC_RM_ALLOC, sizeof a), &a) != 0 || a.status != 0) {
    fprintf(stderr, "fake alloc failed\n");
    exit(3);
  }
  return a.hObjectNew;
}
static void rm_free(int ctl, uint32_t client, uint32_t parent, uint32_t h) {
  struct rmp_nvos00 f = {client, parent, h, 0};
  ioctl(ctl, req(RMP_NV_ESC_RM_FREE, sizeof f), &f);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  char path[512];
  snprintf(path, sizeof path, "%s/nvidiactl", argv[1]);
  int ctl = open(path, O_RDWR | O_CREAT, 0600);
  snprintf(path, sizeof path, "%s/nvidia0", argv[1]);
  const int dev = open(path, O_RDWR | O_CREAT, 0600);
  if (ctl < 0 || dev < 0) return 2;
  unsigned char version[RMP_VERSION_IOCTL_SIZE] = {0};
  ioctl(ctl, req(RMP_NV_ESC_CHECK_VERSION_STR, sizeof version), version);
  const uint32_t client = alloc(ctl, 0, 0, 0, 0);
  const uint32_t device = alloc(ctl, client, client, 0x80, 0);
  const uint32_t m1 = alloc(ctl, client, device, RMP_NV01_MEMORY_LOCAL_USER, 1024 * MIB);
  alloc(ctl, client, device, RMP_NV01_MEMORY_LOCAL_USER, 100 * MIB + 1); /* 102 MiB after rounding */
  alloc(ctl, client, device, RMP_NV01_MEMORY_LOCAL_USER, 8 * MIB);
  rm_free(ctl, client, device, m1);
  const struct timespec tick = {0, 150L * 1000 * 1000};
  nanosleep(&tick, NULL); /* a few sampler lines */
  const pid_t child = fork();
  if (child == 0) {
    /* Its own books: 64 MiB, none of the parent's. */
    const uint32_t c2 = alloc(ctl, 0, 0, 0, 0);
    const uint32_t d2 = alloc(ctl, c2, c2, 0x80, 0);
    alloc(ctl, c2, d2, RMP_NV01_MEMORY_LOCAL_USER, 64 * MIB);
    exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  /* The number of nvidiactl, closed and reused by an ordinary file: its ioctls are not the RM's. */
  const int old = ctl;
  close(ctl);
  snprintf(path, sizeof path, "%s/plain", argv[1]);
  const int plain = open(path, O_RDWR | O_CREAT, 0600);
  printf("reused_fd=%d\n", plain == old);
  unsigned char junk[48] = {0};
  ioctl(plain, req(RMP_NV_ESC_RM_ALLOC, 48), junk); /* ENOTTY from the kernel */
  close(plain);
  /* A number the probe saw as an ordinary file, closed inside libc (fclose does not call close()) and
   * reused by nvidiactl: its RM calls still count. */
  snprintf(path, sizeof path, "%s/stdio", argv[1]);
  FILE* f = fopen(path, "w");
  const int stdio_fd = f != NULL ? fileno(f) : -1;
  ioctl(stdio_fd, 0x5401ul /* TCGETS */, junk);
  if (f != NULL) fclose(f);
  snprintf(path, sizeof path, "%s/nvidiactl", argv[1]);
  ctl = open(path, O_RDWR);
  printf("stdio_fd_reused=%d\n", ctl == stdio_fd);
  alloc(ctl, client, device, RMP_NV01_MEMORY_LOCAL_USER, 4 * MIB);
  rm_free(ctl, client, client, device); /* the device takes the 114 MiB still below it */
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
#endif
