/* The books of bench/gpu/rm_alloc_probe.c: NVIDIA resource-manager (RM) ioctls decoded into per-process
 * counts, times and a running sum of device-local bytes. Kept apart from the interposition so that a host
 * test (rm_alloc_decode_test.c) can feed it synthetic requests without a GPU.
 *
 * The struct layouts below are minimal mirrors of NVIDIA's open-gpu-kernel-modules headers (MIT), as of the
 * 535..595 branches (checked at tags 535.43.02, 545.23.06, 550.40.07, 560.28.03, 570.86.15, 575.51.02,
 * 580.65.06, 580.95.05, 590.44.01, 595.45.04); each names the header it mirrors. Only the fields the probe
 * reads are named; sizes are asserted against what the kernel's RmIoctl (src/nvidia/arch/nvalloc/unix/src/
 * escape.c) insists on, because the kernel accepts a struct only at its exact size. */
#ifndef RM_ALLOC_DECODE_H
#define RM_ALLOC_DECODE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* kernel-open/common/inc/nv-ioctl-numbers.h */
#define RMP_NV_IOCTL_MAGIC 'F'
#define RMP_NV_IOCTL_BASE 200
#define RMP_NV_ESC_CARD_INFO (RMP_NV_IOCTL_BASE + 0)
#define RMP_NV_ESC_REGISTER_FD (RMP_NV_IOCTL_BASE + 1)
#define RMP_NV_ESC_CHECK_VERSION_STR (RMP_NV_IOCTL_BASE + 10)
#define RMP_NV_ESC_IOCTL_XFER_CMD (RMP_NV_IOCTL_BASE + 11)
#define RMP_NV_ESC_ATTACH_GPUS_TO_FD (RMP_NV_IOCTL_BASE + 12)

/* src/nvidia/arch/nvalloc/unix/include/nv_escape.h */
#define RMP_NV_ESC_RM_ALLOC_MEMORY 0x27
#define RMP_NV_ESC_RM_ALLOC_OBJECT 0x28
#define RMP_NV_ESC_RM_FREE 0x29
#define RMP_NV_ESC_RM_CONTROL 0x2A
#define RMP_NV_ESC_RM_ALLOC 0x2B
#define RMP_NV_ESC_RM_DUP_OBJECT 0x34
#define RMP_NV_ESC_RM_SHARE 0x35
#define RMP_NV_ESC_RM_VID_HEAP_CONTROL 0x4A
#define RMP_NV_ESC_RM_MAP_MEMORY 0x4E
#define RMP_NV_ESC_RM_UNMAP_MEMORY 0x4F
#define RMP_NV_ESC_RM_MAP_MEMORY_DMA 0x57
#define RMP_NV_ESC_RM_UNMAP_MEMORY_DMA 0x58

/* kernel-open/common/inc/nv.h: NV_ABSOLUTE_MAX_IOCTL_SIZE (the kernel's bound on an XFER payload). */
#define RMP_MAX_IOCTL_SIZE 16384

/* Memory classes (src/common/sdk/nvidia/inc/class/cl*.h). */
#define RMP_NV01_MEMORY_SYSTEM 0x3eu           /* cl003e.h, NV_MEMORY_ALLOCATION_PARAMS */
#define RMP_NV01_MEMORY_LOCAL_PRIVILEGED 0x3fu /* cl003f.h */
#define RMP_NV01_MEMORY_LOCAL_USER 0x40u       /* cl0040.h, NV_MEMORY_ALLOCATION_PARAMS: video memory */
#define RMP_NV04_MEMORY 0x41u                  /* cl0041.h */
#define RMP_NV_MEMORY_EXTENDED_USER 0x42u      /* cl0042.h, NV_MEMORY_ALLOCATION_PARAMS (EGM: CPU memory) */
#define RMP_NV01_MEMORY_VIRTUAL 0x70u          /* cl0070.h: a virtual range, no backing */
#define RMP_NV01_MEMORY_SYSTEM_OS_DESCRIPTOR 0x71u /* cl0071.h */
#define RMP_NV01_MEMORY_LIST_SYSTEM 0x81u          /* cl84a0.h */
#define RMP_NV01_MEMORY_LIST_FBMEM 0x82u
#define RMP_NV01_MEMORY_LIST_OBJECT 0x83u
#define RMP_NV01_MEMORY_LOCAL_PHYSICAL 0xc2u /* cl00c2.h */
#define RMP_NV_MEMORY_EXPORT 0xe0u
#define RMP_NV01_MEMORY_FLA 0xf3u
#define RMP_NV_MEMORY_FABRIC 0xf8u /* cl00f8.h, NV00F8_ALLOCATION_PARAMETERS */
#define RMP_NV_MEMORY_FABRIC_IMPORT_V2 0xf9u
#define RMP_NV_MEMORY_FABRIC_IMPORTED_REF 0xfbu
#define RMP_NV_MEMORY_MULTICAST_FABRIC 0xfdu
#define RMP_NV_MEMORY_MAPPER 0xfeu
#define RMP_NV50_MEMORY_VIRTUAL 0x50a0u    /* cl50a0.h: a virtual range, no backing */
#define RMP_NV01_MEMORY_DEVICELESS 0x90ceu /* cl90ce.h, NV_MEMORY_ALLOCATION_PARAMS */

/* src/common/sdk/nvidia/inc/nvos.h: NVOS00_PARAMETERS (RM_FREE), 16 bytes in every branch. */
struct rmp_nvos00 {
  uint32_t hRoot, hObjectParent, hObjectOld, status;
};
/* nvos.h: NVOS21_PARAMETERS (RM_ALLOC), 32 bytes. paramsSize exists since 535 (at 515/525 status sat at
 * offset 24 in a struct of the same size: the size alone cannot tell the branches apart). */
struct rmp_nvos21 {
  uint32_t hRoot, hObjectParent, hObjectNew, hClass;
  uint64_t pAllocParms;
  uint32_t paramsSize, status;
};
/* nvos.h: NVOS64_PARAMETERS (RM_ALLOC with rights), 48 bytes since 535 (40 at 515 and 525). */
struct rmp_nvos64 {
  uint32_t hRoot, hObjectParent, hObjectNew, hClass;
  uint64_t pAllocParms, pRightsRequested;
  uint32_t paramsSize, flags, status, pad_;
};
/* nvos.h NVOS64_FLAGS_FINN_SERIALIZED (since 525): pAllocParms then holds a FINN-serialized message. */
#define RMP_NVOS64_FLAGS_FINN_SERIALIZED 0x1u
/* nvos.h NVOS02_PARAMETERS wrapped by nv-unix-nvos-params-wrappers.h's nv_ioctl_nvos02_parameters_with_fd
 * (RM_ALLOC_MEMORY), 56 bytes. */
struct rmp_nvos02_fd {
  uint32_t hRoot, hObjectParent, hObjectNew, hClass, flags, pad_;
  uint64_t pMemory, limit;
  uint32_t status, pad2_;
  int32_t fd, pad3_;
};
/* nvos.h: NVOS32_PARAMETERS (RM_VID_HEAP_CONTROL), 184 bytes; the union's AllocSize/AllocTiledPitchHeight
 * carry size at 88, AllocSizeRange at 80; hMemory at 44 in all three and in Free. */
#define RMP_NVOS32_SIZE 184u
#define RMP_NVOS32_OFF_FUNCTION 8u
#define RMP_NVOS32_OFF_STATUS 20u
#define RMP_NVOS32_OFF_HMEMORY 44u
#define RMP_NVOS32_OFF_FLAGS 52u      /* AllocSize.flags; Free.flags sits at 48 */
#define RMP_NVOS32_OFF_ATTR 56u       /* AllocSize.attr */
#define RMP_NVOS32_OFF_SIZE 88u       /* AllocSize.size, AllocTiledPitchHeight.size */
#define RMP_NVOS32_OFF_SIZE_RANGE 80u /* AllocSizeRange.size */
#define RMP_NVOS32_OFF_ATTR_TILED 64u /* AllocTiledPitchHeight.attr */
#define RMP_NVOS32_FUNCTION_ALLOC_SIZE 2u
#define RMP_NVOS32_FUNCTION_FREE 3u
#define RMP_NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT 6u
#define RMP_NVOS32_FUNCTION_ALLOC_SIZE_RANGE 14u
#define RMP_NVOS32_ALLOC_FLAGS_VIRTUAL 0x00080000u
/* NVOS32_ATTR_LOCATION 26:25: 0 vidmem, 1 PCI (system), 3 any. */
#define RMP_ATTR_LOCATION(attr) (((attr) >> 25) & 3u)
/* nvos.h: NVOS55_PARAMETERS (RM_DUP_OBJECT), 28 bytes. */
struct rmp_nvos55 {
  uint32_t hClient, hParent, hObject, hClientSrc, hObjectSrc, flags, status;
};
/* nvos.h: NV_MEMORY_ALLOCATION_PARAMS, 128 bytes since 545 (120 before); size at 64, flags at 8, attr at 24
 * in every branch. pAllocParms of RM_ALLOC points at it for the classes that take it. */
#define RMP_MEMPARAMS_OFF_FLAGS 8u
#define RMP_MEMPARAMS_OFF_ATTR 24u
#define RMP_MEMPARAMS_OFF_SIZE 64u
#define RMP_MEMPARAMS_MIN 72u
/* class/cl00f8.h: NV00F8_ALLOCATION_PARAMETERS: alignment, allocSize first. */
#define RMP_FABRIC_OFF_SIZE 8u
/* nv-ioctl.h: nv_ioctl_xfer_t, 16 bytes. */
struct rmp_xfer {
  uint32_t cmd, size;
  uint64_t ptr;
};
/* nv-ioctl.h: nv_ioctl_rm_api_version_t: cmd, reply, versionString[64]. */
#define RMP_VERSION_IOCTL_SIZE 72u

/* What a file descriptor is (by the path it was opened with). */
enum rmp_fd_kind {
  RMP_FD_UNKNOWN = 0,
  RMP_FD_OTHER = 1,
  RMP_FD_CTL = 2,      /* /dev/nvidiactl: RM_ALLOC, RM_FREE, VID_HEAP_CONTROL, CONTROL go here */
  RMP_FD_DEV = 3,      /* /dev/nvidia<N>: RM_ALLOC_MEMORY, MAP_MEMORY (with its mmap) */
  RMP_FD_UVM = 4,      /* /dev/nvidia-uvm: its own ioctl numbers, not decoded */
  RMP_FD_NV_OTHER = 5, /* /dev/nvidia-modeset, -caps/, -nvswitch, -nvlink ... */
};
/* Classifies a path: prefix is "/dev/" on a real system (the test passes its own directory). */
int rmp_classify_path(const char* path, const char* prefix);

/* Where a memory object lives, as far as the probe can tell. */
enum rmp_where {
  RMP_NONE = 0,
  RMP_LOCAL = 1,
  RMP_SYSTEM = 2,
  RMP_VIRTUAL = 3,
  RMP_OTHER_MEM = 4,
  RMP_DUP = 5
};

#define RMP_ESC 256
#define RMP_CLASSES 128
#define RMP_OBJECTS (1u << 16)
#define RMP_EVENTS 8192

/* One RM object the process allocated (any class: a device's or client's free frees its descendants). */
struct rmp_object {
  _Atomic uint64_t key; /* (client << 32 | handle) + 1; 0 = empty slot; never cleared (revived on reuse) */
  _Atomic uint32_t live;
  uint32_t parent;
  uint32_t cls;
  uint32_t where;
  _Atomic uint32_t listed; /* in mem_slots already */
  uint32_t pad_;
  uint64_t bytes;
};

/* One allocation or free of a memory object, for the timeline (drained by the sampler thread). */
struct rmp_event {
  _Atomic uint64_t seq; /* index + 1 once written */
  uint64_t t0, t1;      /* CLOCK_MONOTONIC ns before and after the ioctl */
  uint64_t bytes;
  int64_t local_after;
  uint32_t cls, handle, client,
      op; /* 'A' alloc, 'F' free, 'I' freed with an ancestor, 'D' dup, 'R' refused */
  uint32_t where, pad_;
};

struct rmp_esc_stat {
  _Atomic uint64_t count, ns, rm_errors, sys_errors;
  _Atomic uint32_t size_first, size_other, last_rm_status, pad_;
};
struct rmp_class_stat {
  _Atomic uint32_t key; /* class + 1; 0 = empty */
  _Atomic uint32_t pad_;
  _Atomic uint64_t count, bytes;
};

struct rmp_books {
  struct rmp_esc_stat esc[RMP_ESC]; /* by _IOC_NR on nvidiactl / nvidia<N> */
  struct rmp_class_stat classes[RMP_CLASSES];
  _Atomic uint64_t uvm_count, uvm_ns, nv_other_count, nv_other_ns, type_mismatch, xfer, undecoded;
  _Atomic int64_t local_bytes, local_peak, system_bytes, system_peak, dup_bytes;
  _Atomic uint64_t local_allocs, local_frees, implicit_frees, untracked_frees, objects_full, events_lost;
  _Atomic uint64_t classes_full, abi_skipped, denied, denied_bytes, finn_serialized;
  _Atomic int abi_major; /* driver branch from NV_ESC_CHECK_VERSION_STR, 0 = not seen */
  char version[64];
  struct rmp_object objects[RMP_OBJECTS];
  _Atomic uint32_t mem_count; /* memory objects' slots, appended once each: what a parent's free sweeps */
  uint32_t mem_slots[RMP_OBJECTS];
  _Atomic uint64_t event_next;
  struct rmp_event events[RMP_EVENTS];
};

/* Accounts one ioctl the real driver answered: kind of fd, request, argument, the call's return value, and
 * CLOCK_MONOTONIC ns before and after it. Reads the argument only when rc == 0 and _IOC_SIZE matches the
 * struct exactly, and the class's parameters only when the RM answered NV_OK (the kernel read them then). */
void rmp_account(struct rmp_books* b, int kind, unsigned long request, void* arg, int rc, uint64_t t0,
                 uint64_t t1);
/* Opt-in refusal (RM_PROBE_DENY_LOCAL_ABOVE), before the real ioctl: a video-memory RM_ALLOC (NVOS21/64,
 * class NV01_MEMORY_LOCAL_USER) or VID_HEAP_CONTROL ALLOC_SIZE whose requested size would take the local sum
 * above `limit` gets the RM's own NV_ERR_NO_MEMORY in its status and is not passed on: 1 when refused (the
 * caller then returns 0, as the kernel does for an RM error). Reads the caller's parameters before the kernel
 * has validated them: a research mode, for asking how libcuda takes an RM refusal. */
#define RMP_NV_ERR_NO_MEMORY 0x51u
int rmp_deny(struct rmp_books* b, int kind, unsigned long request, void* arg, int64_t limit, uint64_t t);

/* Escape name for the log ("?" when unknown). */
const char* rmp_escape_name(unsigned nr);
/* Parses the driver branch ("580.95.05" -> 580) from a version string; 0 when none. */
int rmp_parse_major(const char* s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
