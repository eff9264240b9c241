/* Host test of the RM probe's decoder (rm_alloc_decode.c): synthetic ioctl requests and structs, as the
 * kernel would have answered them, against the books. No GPU. Built with ASan/UBSan by
 * bench/gpu/rm_alloc_selftest.sh, so a read past a struct the probe was given fails the test. */
#include "rm_alloc_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

#define MIB (1ull << 20)
#define GIB (1ull << 30)
/* _IOWR('F', nr, size) as libcuda encodes it. */
static unsigned long req(unsigned nr, unsigned size) {
  return (3ul << 30) | ((unsigned long)size << 16) | ((unsigned long)'F' << 8) | nr;
}

static struct rmp_books* fresh(void) {
  struct rmp_books* b = calloc(1, sizeof *b);
  if (b == NULL) abort();
  return b;
}

/* Heap copies of exactly the struct's size, so that ASan sees any read past it. */
static void* dup_exact(const void* p, size_t n) {
  void* q = malloc(n);
  if (q == NULL) abort();
  memcpy(q, p, n);
  return q;
}

/* NV_MEMORY_ALLOCATION_PARAMS (128 bytes at 545+) with size, attr and flags set. */
static unsigned char* mem_params(uint64_t size, uint32_t attr, uint32_t flags) {
  unsigned char* p = calloc(1, 128);
  if (p == NULL) abort();
  memcpy(p + RMP_MEMPARAMS_OFF_SIZE, &size, 8);
  memcpy(p + RMP_MEMPARAMS_OFF_ATTR, &attr, 4);
  memcpy(p + RMP_MEMPARAMS_OFF_FLAGS, &flags, 4);
  return p;
}

static uint64_t t;
static void acct(struct rmp_books* b, int kind, unsigned long r, void* arg, int rc) {
  t += 1000;
  rmp_account(b, kind, r, arg, rc, t, t + 500);
}

static void alloc64(struct rmp_books* b, uint32_t client, uint32_t parent, uint32_t h, uint32_t cls,
                    void* params, uint32_t params_size, uint32_t status) {
  struct rmp_nvos64 a = {client, parent, h, cls, (uintptr_t)params, 0, params_size, 0, status, 0};
  void* arg = dup_exact(&a, sizeof a);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, sizeof a), arg, 0);
  free(arg);
}
static void alloc21(struct rmp_books* b, uint32_t client, uint32_t parent, uint32_t h, uint32_t cls,
                    void* params, uint32_t params_size) {
  struct rmp_nvos21 a = {client, parent, h, cls, (uintptr_t)params, params_size, 0};
  void* arg = dup_exact(&a, sizeof a);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, sizeof a), arg, 0);
  free(arg);
}
static void rm_free(struct rmp_books* b, uint32_t client, uint32_t parent, uint32_t h) {
  struct rmp_nvos00 f = {client, parent, h, 0};
  void* arg = dup_exact(&f, sizeof f);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_FREE, sizeof f), arg, 0);
  free(arg);
}
static int64_t local(struct rmp_books* b) { return atomic_load(&b->local_bytes); }

static uint64_t class_count(struct rmp_books* b, uint32_t cls) {
  for (int i = 0; i < RMP_CLASSES; ++i)
    if (atomic_load(&b->classes[i].key) == cls + 1) return atomic_load(&b->classes[i].count);
  return 0;
}

static void test_classify(void) {
  CHECK(rmp_classify_path("/dev/nvidiactl", "/dev/") == RMP_FD_CTL);
  CHECK(rmp_classify_path("/dev/nvidia0", "/dev/") == RMP_FD_DEV);
  CHECK(rmp_classify_path("/dev/nvidia15", "/dev/") == RMP_FD_DEV);
  CHECK(rmp_classify_path("/dev/nvidia-uvm", "/dev/") == RMP_FD_UVM);
  CHECK(rmp_classify_path("/dev/nvidia-uvm-tools", "/dev/") == RMP_FD_NV_OTHER);
  CHECK(rmp_classify_path("/dev/nvidia-modeset", "/dev/") == RMP_FD_NV_OTHER);
  CHECK(rmp_classify_path("/dev/nvidia-caps/nvidia-cap1", "/dev/") == RMP_FD_NV_OTHER);
  CHECK(rmp_classify_path("/dev/nvidia0x", "/dev/") == RMP_FD_NV_OTHER);
  CHECK(rmp_classify_path("/tmp/nvidiactl", "/dev/") == RMP_FD_OTHER);
  CHECK(rmp_classify_path("/dev/null", "/dev/") == RMP_FD_OTHER);
  CHECK(rmp_classify_path("socket:[1234]", "/dev/") == RMP_FD_OTHER);
  CHECK(rmp_classify_path("/tmp/x/nvidiactl", "/tmp/x/") == RMP_FD_CTL);
  CHECK(rmp_parse_major("580.95.05", 10) == 580);
  CHECK(rmp_parse_major("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.43.02  Release", 80) ==
        535);
  CHECK(rmp_parse_major("", 1) == 0);
  CHECK(rmp_parse_major("12.3", 5) == 0);
  CHECK(strcmp(rmp_escape_name(0x2B), "RM_ALLOC") == 0 &&
        strcmp(rmp_escape_name(0x4A), "RM_VID_HEAP_CONTROL") == 0);
}

/* Video memory through RM_ALLOC (both structs), its free, peak, failures and what is not read. */
static void test_alloc_free(void) {
  struct rmp_books* b = fresh();
  unsigned char* p1 = mem_params(GIB, 0, 0);
  alloc64(b, 0xc1, 0xd1, 0x100, RMP_NV01_MEMORY_LOCAL_USER, p1, 128, 0);
  CHECK(local(b) == (int64_t)GIB);
  unsigned char* p2 = mem_params(2 * MIB, 0, 0);
  alloc21(b, 0xc1, 0xd1, 0x101, RMP_NV01_MEMORY_LOCAL_USER, p2, 120); /* a 535-era params struct */
  CHECK(local(b) == (int64_t)(GIB + 2 * MIB));
  CHECK(atomic_load(&b->local_allocs) == 2);
  rm_free(b, 0xc1, 0xd1, 0x100);
  CHECK(local(b) == (int64_t)(2 * MIB));
  CHECK(atomic_load(&b->local_peak) == (int64_t)(GIB + 2 * MIB));
  rm_free(b, 0xc1, 0xd1, 0x100); /* twice: the RM would refuse; the books must not go below */
  CHECK(local(b) == (int64_t)(2 * MIB));
  CHECK(class_count(b, RMP_NV01_MEMORY_LOCAL_USER) == 2);
  CHECK(atomic_load(&b->esc[RMP_NV_ESC_RM_ALLOC].count) == 2);
  CHECK(atomic_load(&b->esc[RMP_NV_ESC_RM_ALLOC].size_first) == 49);
  CHECK(atomic_load(&b->esc[RMP_NV_ESC_RM_ALLOC].size_other) == 33);
  /* The RM refused: counted as an RM error, not in the books. */
  alloc64(b, 0xc1, 0xd1, 0x102, RMP_NV01_MEMORY_LOCAL_USER, p1, 128, 0x51 /* NV_ERR_NO_MEMORY */);
  CHECK(local(b) == (int64_t)(2 * MIB));
  CHECK(atomic_load(&b->esc[RMP_NV_ESC_RM_ALLOC].rm_errors) == 1);
  CHECK(atomic_load(&b->esc[RMP_NV_ESC_RM_ALLOC].last_rm_status) == 0x51);
  /* The ioctl failed (rc -1): the struct is not read at all (NULL would crash if it were). */
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), NULL, -1);
  struct rmp_nvos64 a = {0xc1, 0xd1, 0x103, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)p1, 0, 128, 0, 0, 0};
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &a, -1);
  CHECK(atomic_load(&b->esc[RMP_NV_ESC_RM_ALLOC].sys_errors) == 2);
  CHECK(local(b) == (int64_t)(2 * MIB));
  /* A size the kernel would not accept (515/525's 40-byte NVOS64): not decoded, not read past 40 bytes. */
  unsigned char* small = calloc(1, 40);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 40), small, 0);
  CHECK(atomic_load(&b->undecoded) == 1);
  free(small);
  /* paramsSize too small for the size field: the params are not read (a 16-byte buffer under ASan). */
  unsigned char* tiny = calloc(1, 16);
  alloc64(b, 0xc1, 0xd1, 0x104, RMP_NV01_MEMORY_LOCAL_USER, tiny, 16, 0);
  CHECK(local(b) == (int64_t)(2 * MIB));
  free(tiny);
  /* FINN-serialized parameters (NVOS64 flags bit 0): not the struct, not read; the object is "other". */
  {
    struct rmp_nvos64 s = {0xc1, 0xd1, 0x109, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)p1, 0, 128, 1, 0, 0};
    acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &s, 0);
    CHECK(local(b) == (int64_t)(2 * MIB) && atomic_load(&b->finn_serialized) == 1);
    CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &s, 0, 1) == 0);
  }
  /* A non-memory class (a channel) with parameters: not read as memory. */
  alloc64(b, 0xc1, 0xd1, 0x105, 0xc86f /* HOPPER_CHANNEL_GPFIFO_A */, p1, 128, 0);
  CHECK(local(b) == (int64_t)(2 * MIB));
  /* The same ioctl on a file that is not nvidiactl: ignored. */
  alloc64(b, 0xc1, 0xd1, 0x106, RMP_NV01_MEMORY_LOCAL_USER, p1, 128, 0);
  CHECK(local(b) == (int64_t)(GIB + 2 * MIB));
  struct rmp_nvos64 other = {0xc1, 0xd1, 0x107, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)p1, 0, 128, 0, 0, 0};
  acct(b, RMP_FD_OTHER, req(RMP_NV_ESC_RM_ALLOC, 48), &other, 0);
  CHECK(local(b) == (int64_t)(GIB + 2 * MIB));
  /* A handle reused after its free carries its new size. */
  rm_free(b, 0xc1, 0xd1, 0x106);
  unsigned char* p3 = mem_params(3 * MIB, 0, 0);
  alloc64(b, 0xc1, 0xd1, 0x106, RMP_NV01_MEMORY_LOCAL_USER, p3, 128, 0);
  CHECK(local(b) == (int64_t)(5 * MIB));
  rm_free(b, 0xc1, 0xd1, 0x106);
  CHECK(local(b) == (int64_t)(2 * MIB));
  /* Events: allocations and frees in order with their sizes; the memory object whose size could not be read
   * (0x104) is there too, as "other". */
  CHECK(atomic_load(&b->event_next) == 9); /* 0x104 and the FINN-serialized 0x109 as "other" */
  CHECK(b->events[3].handle == 0x104 && b->events[3].where == RMP_OTHER_MEM);
  CHECK(b->events[0].op == 'A' && b->events[0].bytes == GIB && b->events[0].local_after == (int64_t)GIB);
  CHECK(b->events[2].op == 'F' && b->events[2].bytes == GIB && b->events[2].t1 > b->events[2].t0);
  /* paramsSize 0, as libcuda 580 passes for its Memory objects: the RM sizes the parameters by the
   * class, and so does the probe (the size field is read). A channel with paramsSize 0 stays unread. */
  {
    unsigned char* p0 = mem_params(4 * MIB, 0, 0);
    alloc64(b, 0xc1, 0xd1, 0x10a, RMP_NV01_MEMORY_LOCAL_USER, p0, 0, 0);
    CHECK(local(b) == (int64_t)(6 * MIB));
    CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48),
                   &(struct rmp_nvos64){0xc1, 0xd1, 0x10b, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)p0, 0, 0, 0, 0, 0},
                   (int64_t)(8 * MIB), 1) == 1);
    rm_free(b, 0xc1, 0xd1, 0x10a);
    CHECK(local(b) == (int64_t)(2 * MIB));
    alloc64(b, 0xc1, 0xd1, 0x10c, 0xc86f, p0, 0, 0);
    CHECK(local(b) == (int64_t)(2 * MIB));
    free(p0);
  }
  /* System memory through RM_ALLOC: its own sum. */
  alloc64(b, 0xc1, 0xd1, 0x108, RMP_NV01_MEMORY_SYSTEM, p3, 128, 0);
  CHECK(atomic_load(&b->system_bytes) == (int64_t)(3 * MIB) && local(b) == (int64_t)(2 * MIB));
  free(p1), free(p2), free(p3);
  free(b);
}

static void vid_heap(struct rmp_books* b, uint32_t fn, uint32_t h, uint64_t size, uint32_t attr,
                     uint32_t flags, uint32_t status) {
  unsigned char* s = calloc(1, RMP_NVOS32_SIZE);
  const uint32_t client = 0xc1, dev = 0xd1;
  memcpy(s, &client, 4);
  memcpy(s + 4, &dev, 4);
  memcpy(s + RMP_NVOS32_OFF_FUNCTION, &fn, 4);
  memcpy(s + RMP_NVOS32_OFF_STATUS, &status, 4);
  memcpy(s + RMP_NVOS32_OFF_HMEMORY, &h, 4);
  memcpy(s + RMP_NVOS32_OFF_FLAGS, &flags, 4);
  memcpy(s + (fn == RMP_NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT ? RMP_NVOS32_OFF_ATTR_TILED
                                                                 : RMP_NVOS32_OFF_ATTR),
         &attr, 4);
  memcpy(s + (fn == RMP_NVOS32_FUNCTION_ALLOC_SIZE_RANGE ? RMP_NVOS32_OFF_SIZE_RANGE : RMP_NVOS32_OFF_SIZE),
         &size, 8);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_VID_HEAP_CONTROL, RMP_NVOS32_SIZE), s, 0);
  free(s);
}

static void test_vid_heap_and_alloc_memory(void) {
  struct rmp_books* b = fresh();
  vid_heap(b, RMP_NVOS32_FUNCTION_ALLOC_SIZE, 0x200, 64 * MIB, 0, 0, 0);
  CHECK(local(b) == (int64_t)(64 * MIB));
  vid_heap(b, RMP_NVOS32_FUNCTION_ALLOC_SIZE_RANGE, 0x201, 8 * MIB, 0, 0, 0);
  vid_heap(b, RMP_NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT, 0x202, 4 * MIB, 0, 0, 0);
  CHECK(local(b) == (int64_t)(76 * MIB));
  vid_heap(b, RMP_NVOS32_FUNCTION_ALLOC_SIZE, 0x203, 16 * MIB, 1u << 25 /* LOCATION_PCI */, 0, 0);
  CHECK(local(b) == (int64_t)(76 * MIB) && atomic_load(&b->system_bytes) == (int64_t)(16 * MIB));
  vid_heap(b, RMP_NVOS32_FUNCTION_ALLOC_SIZE, 0x204, 16 * MIB, 0, RMP_NVOS32_ALLOC_FLAGS_VIRTUAL, 0);
  vid_heap(b, RMP_NVOS32_FUNCTION_ALLOC_SIZE, 0x205, 16 * MIB, 0, 0, 0x51);
  CHECK(local(b) == (int64_t)(76 * MIB));
  vid_heap(b, RMP_NVOS32_FUNCTION_FREE, 0x200, 0, 0, 0, 0);
  CHECK(local(b) == (int64_t)(12 * MIB));
  rm_free(b, 0xc1, 0xd1, 0x201); /* a heap allocation freed through RM_FREE */
  CHECK(local(b) == (int64_t)(4 * MIB));
  /* RM_ALLOC_MEMORY on /dev/nvidia0: system memory of limit + 1 bytes. */
  struct rmp_nvos02_fd m;
  memset(&m, 0, sizeof m);
  m.hRoot = 0xc1, m.hObjectParent = 0xd1, m.hObjectNew = 0x300, m.hClass = RMP_NV01_MEMORY_SYSTEM;
  m.limit = 4095;
  acct(b, RMP_FD_DEV, req(RMP_NV_ESC_RM_ALLOC_MEMORY, sizeof m), &m, 0);
  CHECK(atomic_load(&b->system_bytes) == (int64_t)(16 * MIB + 4096));
  free(b);
}

/* A device's, a subdevice's or a client's free takes the memory below it: no RM_FREE per object follows. */
static void test_implicit_frees(void) {
  struct rmp_books* b = fresh();
  unsigned char* p = mem_params(MIB, 0, 0);
  alloc64(b, 0, 0, 0xc1, 0x41 /* NV01_ROOT_CLIENT */, NULL, 0, 0);
  alloc64(b, 0xc1, 0xc1, 0xd1, 0x80 /* NV01_DEVICE_0 */, NULL, 0, 0);
  alloc64(b, 0xc1, 0xd1, 0x51, 0x2080 /* NV20_SUBDEVICE_0 */, NULL, 0, 0);
  alloc64(b, 0xc1, 0xc1, 0xd2, 0x80, NULL, 0, 0);
  alloc64(b, 0xc1, 0xd1, 0x400, RMP_NV01_MEMORY_LOCAL_USER, p, 128, 0);
  alloc64(b, 0xc1, 0x51, 0x401, RMP_NV01_MEMORY_LOCAL_USER, p, 128, 0);
  alloc64(b, 0xc1, 0xd2, 0x402, RMP_NV01_MEMORY_LOCAL_USER, p, 128, 0);
  /* Another client's memory with the same handle numbers. */
  alloc64(b, 0, 0, 0xc2, 0x41, NULL, 0, 0);
  alloc64(b, 0xc2, 0xc2, 0xd1, 0x80, NULL, 0, 0);
  alloc64(b, 0xc2, 0xd1, 0x400, RMP_NV01_MEMORY_LOCAL_USER, p, 128, 0);
  CHECK(local(b) == (int64_t)(4 * MIB));
  rm_free(b, 0xc1, 0xc1, 0xd1); /* device 0xd1 of client 0xc1: 0x400 and 0x401 (below its subdevice) */
  CHECK(local(b) == (int64_t)(2 * MIB));
  CHECK(atomic_load(&b->implicit_frees) == 2);
  rm_free(b, 0xc1, 0, 0xc1); /* the client: 0x402 */
  CHECK(local(b) == (int64_t)MIB);
  CHECK(atomic_load(&b->implicit_frees) == 3);
  rm_free(b, 0xc2, 0xd1, 0x400);
  CHECK(local(b) == 0);
  /* Duplicated handles: their own sum, gone with their free. */
  alloc64(b, 0xc2, 0xd1, 0x500, RMP_NV01_MEMORY_LOCAL_USER, p, 128, 0);
  struct rmp_nvos55 d = {0xc3, 0xd3, 0x600, 0xc2, 0x500, 0, 0};
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_DUP_OBJECT, sizeof d), &d, 0);
  CHECK(atomic_load(&b->dup_bytes) == (int64_t)MIB && local(b) == (int64_t)MIB);
  rm_free(b, 0xc3, 0xd3, 0x600);
  CHECK(atomic_load(&b->dup_bytes) == 0 && local(b) == (int64_t)MIB);
  free(p);
  free(b);
}

static void test_xfer_version_uvm(void) {
  struct rmp_books* b = fresh();
  unsigned char* p = mem_params(32 * MIB, 0, 0);
  struct rmp_nvos64 a = {0xc1, 0xd1, 0x700, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)p, 0, 128, 0, 0, 0};
  struct rmp_xfer x = {(unsigned)req(RMP_NV_ESC_RM_ALLOC, 48), sizeof a, (uintptr_t)&a};
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_IOCTL_XFER_CMD, sizeof x), &x, 0);
  CHECK(local(b) == (int64_t)(32 * MIB) && atomic_load(&b->xfer) == 1);
  /* An XFER that names an oversize payload is not followed. */
  struct rmp_xfer big = {RMP_NV_ESC_RM_ALLOC, RMP_MAX_IOCTL_SIZE + 1, (uintptr_t)&a};
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_IOCTL_XFER_CMD, sizeof big), &big, 0);
  CHECK(local(b) == (int64_t)(32 * MIB));
  /* UVM and other NVIDIA devices: counted, never decoded. */
  acct(b, RMP_FD_UVM, 0x30000001ul, &a, 0);
  acct(b, RMP_FD_NV_OTHER, req(RMP_NV_ESC_RM_ALLOC, 48), &a, 0);
  CHECK(atomic_load(&b->uvm_count) == 1 && atomic_load(&b->nv_other_count) == 1);
  CHECK(local(b) == (int64_t)(32 * MIB));
  /* Type other than 'F' on nvidiactl: counted as a mismatch (the kernel ignores the type). */
  unsigned char ctl[32] = {0};
  acct(b, RMP_FD_CTL, (req(RMP_NV_ESC_RM_CONTROL, 32) & ~0xff00ul) | ('G' << 8), ctl, 0);
  CHECK(atomic_load(&b->type_mismatch) == 1);
  /* The version string libcuda sends first selects the ABI; a pre-535 driver is counted, not decoded. */
  unsigned char v[RMP_VERSION_IOCTL_SIZE] = {0};
  memcpy(v + 8, "525.147.05", 11);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_CHECK_VERSION_STR, sizeof v), v, 0);
  CHECK(atomic_load(&b->abi_major) == 525 && strcmp(b->version, "525.147.05") == 0);
  a.hObjectNew = 0x701;
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &a, 0);
  CHECK(local(b) == (int64_t)(32 * MIB) && atomic_load(&b->abi_skipped) == 1);
  free(p);
  free(b);
}

/* Random requests of every size on the known escapes: no read outside the buffers (ASan), the books never
 * below zero, and the local sum equal to its live objects. Nested pointers point at real buffers, as the
 * kernel's NV_OK guarantees they did. */
static void test_random(void) {
  struct rmp_books* b = fresh();
  unsigned char* params = mem_params(0, 0, 0);
  const unsigned nrs[] = {RMP_NV_ESC_RM_ALLOC,
                          RMP_NV_ESC_RM_FREE,
                          RMP_NV_ESC_RM_ALLOC_MEMORY,
                          RMP_NV_ESC_RM_VID_HEAP_CONTROL,
                          RMP_NV_ESC_RM_DUP_OBJECT,
                          RMP_NV_ESC_IOCTL_XFER_CMD,
                          RMP_NV_ESC_RM_CONTROL,
                          RMP_NV_ESC_CHECK_VERSION_STR,
                          RMP_NV_ESC_RM_MAP_MEMORY,
                          0x5f,
                          7};
  uint64_t seed = 42;
  for (int i = 0; i < 200000; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const unsigned nr = nrs[(seed >> 33) % (sizeof nrs / sizeof nrs[0])];
    const unsigned sizes[] = {0, 16, 28, 32, 40, 48, 56, 72, 184, (unsigned)(seed >> 50) % 300};
    const unsigned size = sizes[(seed >> 20) % 10];
    unsigned char* buf = malloc(size ? size : 1);
    for (unsigned j = 0; j < size; ++j) buf[j] = (unsigned char)(seed >> (j % 56));
    /* Small handles and statuses so that frees meet allocations; pointers to the params buffer only. */
    for (unsigned j = 0; j + 4 <= size && j < 16; j += 4)
      buf[j] = (unsigned char)(seed >> (j + 3)) & 7, buf[j + 1] = buf[j + 2] = buf[j + 3] = 0;
    if (size >= 24 && (nr == RMP_NV_ESC_RM_ALLOC || nr == RMP_NV_ESC_IOCTL_XFER_CMD)) {
      const uint64_t ptr = (seed & 1) ? (uintptr_t)params : 0;
      memcpy(buf + (nr == RMP_NV_ESC_RM_ALLOC ? 16 : 8), &ptr, 8);
      const uint32_t ps = (uint32_t)(seed >> 40) % 129;
      if (nr == RMP_NV_ESC_RM_ALLOC && size == 32) memcpy(buf + 24, &ps, 4);
      if (nr == RMP_NV_ESC_RM_ALLOC && size == 48) memcpy(buf + 32, &ps, 4);
      if (nr == RMP_NV_ESC_IOCTL_XFER_CMD) {
        const uint32_t inner = RMP_NV_ESC_RM_ALLOC, isz = 48;
        memcpy(buf, &inner, 4), memcpy(buf + 4, &isz, 4);
        const uint64_t none = 0;
        memcpy(buf + 8, &none, 8); /* keep nested XFER payloads out of this loop: covered above */
      }
      if (nr == RMP_NV_ESC_RM_ALLOC) {
        uint32_t st = (seed >> 45) & 1 ? 0 : 0x51;
        if (size == 32) memcpy(buf + 28, &st, 4);
        if (size == 48) memcpy(buf + 40, &st, 4);
        uint32_t cls = (seed >> 47) & 1 ? RMP_NV01_MEMORY_LOCAL_USER : (uint32_t)(seed >> 48) & 0xff;
        memcpy(buf + 12, &cls, 4);
        uint64_t sz = ((seed >> 30) & 0xff) * MIB;
        memcpy(params + 64, &sz, 8);
      }
    }
    acct(b, (seed >> 60) & 1 ? RMP_FD_CTL : RMP_FD_DEV, req(nr, size), size ? buf : NULL,
         (seed >> 61) == 7 ? -1 : 0);
    free(buf);
    CHECK(local(b) >= 0);
    if (g_failures) break;
  }
  int64_t live = 0;
  for (uint32_t i = 0; i < RMP_OBJECTS; ++i)
    if (atomic_load(&b->objects[i].key) && atomic_load(&b->objects[i].live) &&
        b->objects[i].where == RMP_LOCAL)
      live += (int64_t)b->objects[i].bytes;
  CHECK(live == local(b));
  fprintf(stderr, "random: local_allocs=%llu local_frees=%llu implicit=%llu\n",
          (unsigned long long)atomic_load(&b->local_allocs), (unsigned long long)atomic_load(&b->local_frees),
          (unsigned long long)atomic_load(&b->implicit_frees));
  CHECK(atomic_load(&b->local_allocs) > 100 && atomic_load(&b->local_frees) > 100);
  free(params);
  free(b);
}

/* The opt-in refusal: above the limit the RM's NV_ERR_NO_MEMORY, no kernel call, nothing in the books. */
static void test_deny(void) {
  struct rmp_books* b = fresh();
  const int64_t limit = (int64_t)GIB;
  unsigned char* p = mem_params(768 * MIB, 0, 0);
  struct rmp_nvos64 a = {0xc1, 0xd1, 0x800, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)p, 0, 128, 0, 0, 0};
  CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &a, limit, 1) == 0);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &a, 0);
  CHECK(local(b) == (int64_t)(768 * MIB));
  unsigned char* q = mem_params(512 * MIB, 0, 0);
  struct rmp_nvos21 a21 = {0xc1, 0xd1, 0x801, RMP_NV01_MEMORY_LOCAL_USER, (uintptr_t)q, 128, 0};
  CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 32), &a21, limit, 2) == 1);
  CHECK(a21.status == RMP_NV_ERR_NO_MEMORY);
  acct(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 32), &a21,
       0); /* as the probe's caller sees it: rc 0, RM error */
  CHECK(local(b) == (int64_t)(768 * MIB) && atomic_load(&b->denied) == 1);
  CHECK(atomic_load(&b->denied_bytes) == 512 * MIB);
  /* System memory, other classes, other fds and unknown sizes pass. */
  struct rmp_nvos64 sys = {0xc1, 0xd1, 0x802, RMP_NV01_MEMORY_SYSTEM, (uintptr_t)q, 0, 128, 0, 0, 0};
  CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 48), &sys, limit, 3) == 0);
  CHECK(rmp_deny(b, RMP_FD_DEV, req(RMP_NV_ESC_RM_ALLOC, 48), &a, 0, 3) == 0);
  CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_ALLOC, 40), &a, 0, 3) == 0);
  /* VID_HEAP_CONTROL ALLOC_SIZE in video memory. */
  unsigned char* s = calloc(1, RMP_NVOS32_SIZE);
  const uint32_t fn = RMP_NVOS32_FUNCTION_ALLOC_SIZE;
  const uint64_t want = 512 * MIB;
  memcpy(s + RMP_NVOS32_OFF_FUNCTION, &fn, 4);
  memcpy(s + RMP_NVOS32_OFF_SIZE, &want, 8);
  CHECK(rmp_deny(b, RMP_FD_CTL, req(RMP_NV_ESC_RM_VID_HEAP_CONTROL, RMP_NVOS32_SIZE), s, limit, 4) == 1);
  uint32_t st;
  memcpy(&st, s + RMP_NVOS32_OFF_STATUS, 4);
  CHECK(st == RMP_NV_ERR_NO_MEMORY);
  CHECK(b->events[atomic_load(&b->event_next) - 1].op == 'R');
  free(s), free(p), free(q), free(b);
}

int main(void) {
  test_classify();
  test_alloc_free();
  test_vid_heap_and_alloc_memory();
  test_implicit_frees();
  test_xfer_version_uvm();
  test_random();
  test_deny();
  if (g_failures) {
    fprintf(stderr, "rm_alloc_decode_test: %d failure(s)\n", g_failures);
    return 1;
  }
  printf("rm_alloc_decode_test: all passed\n");
  return 0;
}
