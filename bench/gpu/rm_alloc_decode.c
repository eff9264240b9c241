/* Decoder and books of the RM allocation probe (see rm_alloc_decode.h and rm_alloc_probe.c). Lock-free:
 * every shared word is an atomic; tables are fixed-size and never freed, so a concurrent reader sees at
 * worst a stale entry. */
#include "rm_alloc_decode.h"

#include <string.h>

#define RMP_IOC_NR(r) ((unsigned)((r)&0xffu))
#define RMP_IOC_TYPE(r) ((unsigned)(((r) >> 8) & 0xffu))
#define RMP_IOC_SIZE(r) ((unsigned)(((r) >> 16) & 0x3fffu))

#define RLX memory_order_relaxed

_Static_assert(sizeof(struct rmp_nvos00) == 16, "NVOS00_PARAMETERS");
_Static_assert(sizeof(struct rmp_nvos21) == 32, "NVOS21_PARAMETERS");
_Static_assert(sizeof(struct rmp_nvos64) == 48, "NVOS64_PARAMETERS");
_Static_assert(sizeof(struct rmp_nvos02_fd) == 56, "nv_ioctl_nvos02_parameters_with_fd");
_Static_assert(offsetof(struct rmp_nvos02_fd, limit) == 32 && offsetof(struct rmp_nvos02_fd, status) == 40,
               "NVOS02_PARAMETERS");
_Static_assert(sizeof(struct rmp_nvos55) == 28, "NVOS55_PARAMETERS");
_Static_assert(sizeof(struct rmp_xfer) == 16, "nv_ioctl_xfer_t");

int rmp_classify_path(const char* path, const char* prefix) {
  const size_t n = strlen(prefix);
  if (strncmp(path, prefix, n) != 0) return RMP_FD_OTHER;
  const char* rest = path + n;
  if (strncmp(rest, "nvidia", 6) != 0) return RMP_FD_OTHER;
  rest += 6;
  if (strcmp(rest, "ctl") == 0) return RMP_FD_CTL;
  if (strcmp(rest, "-uvm") == 0) return RMP_FD_UVM;
  if (*rest >= '0' && *rest <= '9') {
    while (*rest >= '0' && *rest <= '9') ++rest;
    return *rest == '\0' ? RMP_FD_DEV : RMP_FD_NV_OTHER;
  }
  return RMP_FD_NV_OTHER;
}

int rmp_parse_major(const char* s, size_t n) {
  for (size_t i = 0; i < n && s[i] != '\0'; ++i) {
    if (s[i] < '0' || s[i] > '9') continue;
    int v = 0;
    size_t j = i;
    while (j < n && s[j] >= '0' && s[j] <= '9' && v < 100000) v = v * 10 + (s[j++] - '0');
    if (j < n && s[j] == '.' && v >= 100) return v;
    i = j;
  }
  return 0;
}

const char* rmp_escape_name(unsigned nr) {
  switch (nr) {
    case RMP_NV_ESC_RM_ALLOC_MEMORY:
      return "RM_ALLOC_MEMORY";
    case RMP_NV_ESC_RM_ALLOC_OBJECT:
      return "RM_ALLOC_OBJECT";
    case RMP_NV_ESC_RM_FREE:
      return "RM_FREE";
    case RMP_NV_ESC_RM_CONTROL:
      return "RM_CONTROL";
    case RMP_NV_ESC_RM_ALLOC:
      return "RM_ALLOC";
    case 0x32:
      return "RM_CONFIG_GET";
    case 0x33:
      return "RM_CONFIG_SET";
    case RMP_NV_ESC_RM_DUP_OBJECT:
      return "RM_DUP_OBJECT";
    case RMP_NV_ESC_RM_SHARE:
      return "RM_SHARE";
    case 0x39:
      return "RM_I2C_ACCESS";
    case 0x41:
      return "RM_IDLE_CHANNELS";
    case RMP_NV_ESC_RM_VID_HEAP_CONTROL:
      return "RM_VID_HEAP_CONTROL";
    case 0x4D:
      return "RM_ACCESS_REGISTRY";
    case RMP_NV_ESC_RM_MAP_MEMORY:
      return "RM_MAP_MEMORY";
    case RMP_NV_ESC_RM_UNMAP_MEMORY:
      return "RM_UNMAP_MEMORY";
    case 0x52:
      return "RM_GET_EVENT_DATA";
    case 0x54:
      return "RM_ALLOC_CONTEXT_DMA2";
    case 0x56:
      return "RM_ADD_VBLANK_CALLBACK";
    case RMP_NV_ESC_RM_MAP_MEMORY_DMA:
      return "RM_MAP_MEMORY_DMA";
    case RMP_NV_ESC_RM_UNMAP_MEMORY_DMA:
      return "RM_UNMAP_MEMORY_DMA";
    case 0x59:
      return "RM_BIND_CONTEXT_DMA";
    case 0x5C:
      return "RM_EXPORT_OBJECT_TO_FD";
    case 0x5D:
      return "RM_IMPORT_OBJECT_FROM_FD";
    case 0x5E:
      return "RM_UPDATE_DEVICE_MAPPING_INFO";
    case 0x5F:
      return "RM_LOCKLESS_DIAGNOSTIC";
    case RMP_NV_ESC_CARD_INFO:
      return "CARD_INFO";
    case RMP_NV_ESC_REGISTER_FD:
      return "REGISTER_FD";
    case RMP_NV_IOCTL_BASE + 6:
      return "ALLOC_OS_EVENT";
    case RMP_NV_IOCTL_BASE + 7:
      return "FREE_OS_EVENT";
    case RMP_NV_IOCTL_BASE + 9:
      return "STATUS_CODE";
    case RMP_NV_ESC_CHECK_VERSION_STR:
      return "CHECK_VERSION_STR";
    case RMP_NV_ESC_IOCTL_XFER_CMD:
      return "IOCTL_XFER_CMD";
    case RMP_NV_ESC_ATTACH_GPUS_TO_FD:
      return "ATTACH_GPUS_TO_FD";
    case RMP_NV_IOCTL_BASE + 13:
      return "QUERY_DEVICE_INTR";
    case RMP_NV_IOCTL_BASE + 14:
      return "SYS_PARAMS";
    case RMP_NV_IOCTL_BASE + 17:
      return "EXPORT_TO_DMABUF_FD";
    case RMP_NV_IOCTL_BASE + 18:
      return "WAIT_OPEN_COMPLETE";
    default:
      return "?";
  }
}

static uint32_t get32(const void* base, size_t off) {
  uint32_t v;
  memcpy(&v, (const char*)base + off, sizeof v);
  return v;
}
static uint64_t get64(const void* base, size_t off) {
  uint64_t v;
  memcpy(&v, (const char*)base + off, sizeof v);
  return v;
}

static void atomic_max(_Atomic int64_t* peak, int64_t v) {
  int64_t cur = atomic_load_explicit(peak, RLX);
  while (v > cur && !atomic_compare_exchange_weak_explicit(peak, &cur, v, RLX, RLX)) {
  }
}

/* ---- object table: open addressing on (client, handle), entries never removed (revived on reuse) ---- */

static uint64_t obj_key(uint32_t client, uint32_t handle) { return (((uint64_t)client << 32) | handle) + 1; }
static uint32_t obj_hash(uint64_t k) { return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 40); }
#define RMP_PROBES 512u

static struct rmp_object* obj_find(struct rmp_books* b, uint32_t client, uint32_t handle) {
  const uint64_t k = obj_key(client, handle);
  uint32_t i = obj_hash(k);
  for (uint32_t n = 0; n < RMP_PROBES; ++n, ++i) {
    struct rmp_object* o = &b->objects[i & (RMP_OBJECTS - 1)];
    const uint64_t cur = atomic_load_explicit(&o->key, memory_order_acquire);
    if (cur == k) return o;
    if (cur == 0) return NULL;
  }
  return NULL;
}

static struct rmp_object* obj_claim(struct rmp_books* b, uint32_t client, uint32_t handle) {
  const uint64_t k = obj_key(client, handle);
  uint32_t i = obj_hash(k);
  for (uint32_t n = 0; n < RMP_PROBES; ++n, ++i) {
    struct rmp_object* o = &b->objects[i & (RMP_OBJECTS - 1)];
    uint64_t cur = atomic_load_explicit(&o->key, memory_order_acquire);
    if (cur == k) return o;
    if (cur == 0) {
      if (atomic_compare_exchange_strong_explicit(&o->key, &cur, k, memory_order_acq_rel,
                                                  memory_order_acquire))
        return o;
      if (cur == k) return o;
    }
  }
  atomic_fetch_add_explicit(&b->objects_full, 1, RLX);
  return NULL;
}

static void add_where(struct rmp_books* b, uint32_t where, int64_t bytes) {
  if (where == RMP_LOCAL) {
    const int64_t now = atomic_fetch_add_explicit(&b->local_bytes, bytes, RLX) + bytes;
    atomic_max(&b->local_peak, now);
  } else if (where == RMP_SYSTEM) {
    const int64_t now = atomic_fetch_add_explicit(&b->system_bytes, bytes, RLX) + bytes;
    atomic_max(&b->system_peak, now);
  } else if (where == RMP_DUP) {
    atomic_fetch_add_explicit(&b->dup_bytes, bytes, RLX);
  }
}

static void event(struct rmp_books* b, uint32_t op, const struct rmp_object* o, uint32_t client,
                  uint32_t handle, uint64_t t0, uint64_t t1) {
  const uint64_t n = atomic_fetch_add_explicit(&b->event_next, 1, RLX);
  struct rmp_event* e = &b->events[n % RMP_EVENTS];
  /* A slot the sampler has not drained yet (seq still set) is overwritten: counted as lost there. */
  atomic_store_explicit(&e->seq, 0, RLX);
  e->t0 = t0;
  e->t1 = t1;
  e->bytes = o->bytes;
  e->local_after = atomic_load_explicit(&b->local_bytes, RLX);
  e->cls = o->cls;
  e->handle = handle;
  e->client = client;
  e->op = op;
  e->where = o->where;
  atomic_store_explicit(&e->seq, n + 1, memory_order_release);
}

static void class_add(struct rmp_books* b, uint32_t cls, uint64_t bytes) {
  const uint32_t key = cls + 1;
  uint32_t i = (cls * 2654435761u) >> 25;
  for (uint32_t n = 0; n < RMP_CLASSES; ++n, ++i) {
    struct rmp_class_stat* c = &b->classes[i & (RMP_CLASSES - 1)];
    uint32_t cur = atomic_load_explicit(&c->key, memory_order_acquire);
    if (cur == 0 &&
        !atomic_compare_exchange_strong_explicit(&c->key, &cur, key, memory_order_acq_rel,
                                                 memory_order_acquire) &&
        cur != key)
      continue;
    if (cur != 0 && cur != key) continue;
    atomic_fetch_add_explicit(&c->count, 1, RLX);
    atomic_fetch_add_explicit(&c->bytes, bytes, RLX);
    return;
  }
  atomic_fetch_add_explicit(&b->classes_full, 1, RLX);
}

static int retire(struct rmp_books* b, struct rmp_object* o, uint32_t op, uint64_t t0, uint64_t t1);

static void list_memory(struct rmp_books* b, struct rmp_object* o) {
  uint32_t no = 0;
  if (!atomic_compare_exchange_strong_explicit(&o->listed, &no, 1, RLX, RLX)) return;
  const uint32_t n = atomic_fetch_add_explicit(&b->mem_count, 1, RLX);
  if (n < RMP_OBJECTS) b->mem_slots[n] = (uint32_t)(o - b->objects);
}

static void record_alloc(struct rmp_books* b, uint32_t client, uint32_t parent, uint32_t handle, uint32_t cls,
                         uint32_t where, uint64_t bytes, uint64_t t0, uint64_t t1) {
  class_add(b, cls, bytes);
  struct rmp_object* o = obj_claim(b, client, handle);
  if (o == NULL) return;
  /* The RM refuses a live handle; should it ever answer NV_OK for one, the old object is gone. */
  retire(b, o, 'F', t0, t1);
  o->parent = parent;
  o->cls = cls;
  o->where = where;
  o->bytes = bytes;
  atomic_store_explicit(&o->live, 1, memory_order_release);
  if (where == RMP_NONE) return;
  list_memory(b, o);
  add_where(b, where, (int64_t)bytes);
  if (where == RMP_LOCAL) atomic_fetch_add_explicit(&b->local_allocs, 1, RLX);
  event(b, 'A', o, client, handle, t0, t1);
}

/* Retires one object; 1 when it was live. */
static int retire(struct rmp_books* b, struct rmp_object* o, uint32_t op, uint64_t t0, uint64_t t1) {
  uint32_t one = 1;
  if (!atomic_compare_exchange_strong_explicit(&o->live, &one, 0, memory_order_acq_rel, memory_order_acquire))
    return 0;
  if (o->where == RMP_NONE) return 1;
  add_where(b, o->where, -(int64_t)o->bytes);
  if (o->where == RMP_LOCAL) atomic_fetch_add_explicit(&b->local_frees, 1, RLX);
  if (op == 'I') atomic_fetch_add_explicit(&b->implicit_frees, 1, RLX);
  const uint64_t k = atomic_load_explicit(&o->key, RLX) - 1;
  event(b, op, o, (uint32_t)(k >> 32), (uint32_t)k, t0, t1);
  return 1;
}

/* Memory objects have no children the probe counts; anything else (client, device, subdevice, VA space,
 * channel...) takes its descendants with it: the RM frees them without further ioctls. */
static int is_leaf_class(uint32_t cls) {
  switch (cls) {
    case RMP_NV01_MEMORY_SYSTEM:
    case RMP_NV01_MEMORY_LOCAL_PRIVILEGED:
    case RMP_NV01_MEMORY_LOCAL_USER:
    case RMP_NV_MEMORY_EXTENDED_USER:
    case RMP_NV01_MEMORY_VIRTUAL:
    case RMP_NV01_MEMORY_SYSTEM_OS_DESCRIPTOR:
    case RMP_NV01_MEMORY_LIST_SYSTEM:
    case RMP_NV01_MEMORY_LIST_FBMEM:
    case RMP_NV01_MEMORY_LIST_OBJECT:
    case RMP_NV01_MEMORY_LOCAL_PHYSICAL:
    case RMP_NV01_MEMORY_FLA:
    case RMP_NV_MEMORY_FABRIC:
    case RMP_NV_MEMORY_FABRIC_IMPORT_V2:
    case RMP_NV_MEMORY_FABRIC_IMPORTED_REF:
    case RMP_NV_MEMORY_MULTICAST_FABRIC:
    case RMP_NV50_MEMORY_VIRTUAL:
    case RMP_NV01_MEMORY_DEVICELESS:
      return 1;
    default:
      return 0;
  }
}

static int descends_from(struct rmp_books* b, uint32_t client, const struct rmp_object* o,
                         uint32_t ancestor) {
  uint32_t p = o->parent;
  for (int depth = 0; depth < 16; ++depth) {
    if (p == ancestor) return 1;
    if (p == client || p == 0) return ancestor == client;
    const struct rmp_object* up = obj_find(b, client, p);
    if (up == NULL) return 0;
    p = up->parent;
  }
  return 0;
}

static void record_free(struct rmp_books* b, uint32_t client, uint32_t handle, uint64_t t0, uint64_t t1) {
  struct rmp_object* o = obj_find(b, client, handle);
  if (o == NULL) {
    atomic_fetch_add_explicit(&b->untracked_frees, 1, RLX);
  } else {
    retire(b, o, 'F', t0, t1);
    if (is_leaf_class(o->cls)) return;
  }
  /* A client's or a parent's free: sweep the memory objects of that client below it. */
  if (atomic_load_explicit(&b->local_bytes, RLX) == 0 && atomic_load_explicit(&b->system_bytes, RLX) == 0 &&
      atomic_load_explicit(&b->dup_bytes, RLX) == 0)
    return;
  uint32_t n = atomic_load_explicit(&b->mem_count, memory_order_acquire);
  if (n > RMP_OBJECTS) n = RMP_OBJECTS;
  for (uint32_t i = 0; i < n; ++i) {
    struct rmp_object* m = &b->objects[b->mem_slots[i] & (RMP_OBJECTS - 1)];
    const uint64_t k = atomic_load_explicit(&m->key, memory_order_acquire);
    if (k == 0 || (uint32_t)((k - 1) >> 32) != client || m->where == RMP_NONE ||
        !atomic_load_explicit(&m->live, memory_order_acquire))
      continue;
    if (handle == client || descends_from(b, client, m, handle)) retire(b, m, 'I', t0, t1);
  }
}

static uint32_t mem_where(uint32_t cls, uint32_t attr, uint32_t flags) {
  if (flags & RMP_NVOS32_ALLOC_FLAGS_VIRTUAL) return RMP_VIRTUAL;
  switch (cls) {
    case RMP_NV01_MEMORY_LOCAL_USER:
      return RMP_LOCAL; /* vidmemConstruct refuses anything but vidmem */
    case RMP_NV01_MEMORY_SYSTEM:
    case RMP_NV_MEMORY_EXTENDED_USER:
    case RMP_NV01_MEMORY_DEVICELESS:
      return RMP_SYSTEM;
    default:
      return RMP_ATTR_LOCATION(attr) == 0 ? RMP_LOCAL : RMP_SYSTEM;
  }
}

/* The parameter size the RM assumes for a class when the caller passes none: for the Memory classes
 * at least the NV_MEMORY_ALLOCATION_PARAMS fields read here (the struct is 120 or 128 bytes). */
static uint32_t class_param_size(uint32_t cls) {
  switch (cls) {
    case RMP_NV01_MEMORY_SYSTEM:
    case RMP_NV01_MEMORY_LOCAL_USER:
    case RMP_NV_MEMORY_EXTENDED_USER:
    case RMP_NV01_MEMORY_DEVICELESS:
      return RMP_MEMPARAMS_MIN;
    default:
      return 0;
  }
}

/* RM_ALLOC (NVOS21 or NVOS64 share the leading fields): a memory class's size from its parameters. */
static void decode_rm_alloc(struct rmp_books* b, const void* arg, unsigned size, uint64_t t0, uint64_t t1) {
  const struct rmp_nvos21* a = (const struct rmp_nvos21*)arg;
  uint32_t status, params_size;
  int finn = 0;
  if (size == sizeof(struct rmp_nvos21)) {
    status = a->status;
    params_size = a->paramsSize;
  } else {
    const struct rmp_nvos64* a64 = (const struct rmp_nvos64*)arg;
    status = a64->status;
    params_size = a64->paramsSize;
    if (a64->flags & RMP_NVOS64_FLAGS_FINN_SERIALIZED) {
      /* The parameters are FINN-serialized, not the struct: their size is unknown to the probe. */
      atomic_fetch_add_explicit(&b->finn_serialized, 1, RLX);
      finn = 1;
    }
  }
  if (status != 0) return;
  /* paramsSize 0: the RM takes the class's own parameter size (rmapiGetClassAllocParamSize), which is
   * what libcuda 580 passes for its Memory objects (device call 3 of 2026-11-29: 1,297 class-0x40
   * allocations, every one with paramsSize 0, read as 0 bytes). */
  if (params_size == 0 && !finn) params_size = class_param_size(a->hClass);
  if (finn) params_size = 0;
  const uint32_t cls = a->hClass;
  const void* p = (const void*)(uintptr_t)a->pAllocParms;
  uint32_t where = RMP_NONE;
  uint64_t bytes = 0;
  if (p != NULL) {
    switch (cls) {
      case RMP_NV01_MEMORY_SYSTEM:
      case RMP_NV01_MEMORY_LOCAL_USER:
      case RMP_NV_MEMORY_EXTENDED_USER:
      case RMP_NV01_MEMORY_DEVICELESS:
        if (params_size >= RMP_MEMPARAMS_MIN) {
          bytes = get64(p, RMP_MEMPARAMS_OFF_SIZE); /* [IN/OUT]: what the RM allocated */
          where = mem_where(cls, get32(p, RMP_MEMPARAMS_OFF_ATTR), get32(p, RMP_MEMPARAMS_OFF_FLAGS));
        }
        break;
      case RMP_NV_MEMORY_FABRIC:
        if (params_size >= RMP_FABRIC_OFF_SIZE + 8) {
          bytes = get64(p, RMP_FABRIC_OFF_SIZE);
          where = RMP_LOCAL;
        }
        break;
      default:
        break;
    }
  }
  if (where == RMP_NONE && is_leaf_class(cls)) where = RMP_OTHER_MEM;
  /* A new client's handle is its own root. */
  const uint32_t client = (cls == 0x41u || cls == 0u || cls == 1u) ? a->hObjectNew : a->hRoot;
  record_alloc(b, client, a->hObjectParent, a->hObjectNew, cls, where, bytes, t0, t1);
}

static void decode_vid_heap(struct rmp_books* b, const void* arg, uint64_t t0, uint64_t t1) {
  if (get32(arg, RMP_NVOS32_OFF_STATUS) != 0) return;
  const uint32_t fn = get32(arg, RMP_NVOS32_OFF_FUNCTION);
  const uint32_t client = get32(arg, 0), parent = get32(arg, 4);
  const uint32_t hmem = get32(arg, RMP_NVOS32_OFF_HMEMORY);
  uint64_t bytes;
  uint32_t attr;
  switch (fn) {
    case RMP_NVOS32_FUNCTION_ALLOC_SIZE:
      bytes = get64(arg, RMP_NVOS32_OFF_SIZE);
      attr = get32(arg, RMP_NVOS32_OFF_ATTR);
      break;
    case RMP_NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT:
      bytes = get64(arg, RMP_NVOS32_OFF_SIZE);
      attr = get32(arg, RMP_NVOS32_OFF_ATTR_TILED);
      break;
    case RMP_NVOS32_FUNCTION_ALLOC_SIZE_RANGE:
      bytes = get64(arg, RMP_NVOS32_OFF_SIZE_RANGE);
      attr = get32(arg, RMP_NVOS32_OFF_ATTR);
      break;
    case RMP_NVOS32_FUNCTION_FREE:
      record_free(b, client, hmem, t0, t1);
      return;
    default:
      return;
  }
  const uint32_t where = mem_where(0, attr, get32(arg, RMP_NVOS32_OFF_FLAGS));
  /* The heap's objects are NV01_MEMORY_LOCAL_USER (or system) Memory objects under the device. */
  record_alloc(b, client, parent, hmem,
               where == RMP_LOCAL ? RMP_NV01_MEMORY_LOCAL_USER : RMP_NV01_MEMORY_SYSTEM, where, bytes, t0,
               t1);
}

static void decode(struct rmp_books* b, unsigned nr, unsigned size, void* arg, uint64_t t0, uint64_t t1,
                   int depth) {
  switch (nr) {
    case RMP_NV_ESC_RM_ALLOC:
      if (size == sizeof(struct rmp_nvos21) || size == sizeof(struct rmp_nvos64)) {
        decode_rm_alloc(b, arg, size, t0, t1);
        return;
      }
      break;
    case RMP_NV_ESC_RM_FREE:
      if (size == sizeof(struct rmp_nvos00)) {
        const struct rmp_nvos00* f = (const struct rmp_nvos00*)arg;
        if (f->status == 0) record_free(b, f->hRoot, f->hObjectOld, t0, t1);
        return;
      }
      break;
    case RMP_NV_ESC_RM_ALLOC_MEMORY:
      if (size == sizeof(struct rmp_nvos02_fd)) {
        const struct rmp_nvos02_fd* m = (const struct rmp_nvos02_fd*)arg;
        if (m->status == 0) {
          const uint32_t where = m->hClass == RMP_NV01_MEMORY_LOCAL_USER ? RMP_LOCAL
                                 : m->hClass == RMP_NV01_MEMORY_SYSTEM   ? RMP_SYSTEM
                                                                         : RMP_OTHER_MEM;
          record_alloc(b, m->hRoot, m->hObjectParent, m->hObjectNew, m->hClass, where, m->limit + 1, t0, t1);
        }
        return;
      }
      break;
    case RMP_NV_ESC_RM_VID_HEAP_CONTROL:
      if (size == RMP_NVOS32_SIZE) {
        decode_vid_heap(b, arg, t0, t1);
        return;
      }
      break;
    case RMP_NV_ESC_RM_DUP_OBJECT:
      if (size == sizeof(struct rmp_nvos55)) {
        const struct rmp_nvos55* d = (const struct rmp_nvos55*)arg;
        if (d->status != 0) return;
        const struct rmp_object* src = obj_find(b, d->hClientSrc, d->hObjectSrc);
        if (src != NULL && src->where != RMP_NONE) {
          /* A second handle on the same memory: its own books, not the local sum. */
          struct rmp_object* o = obj_claim(b, d->hClient, d->hObject);
          if (o != NULL) {
            o->parent = d->hParent;
            o->cls = src->cls;
            o->where = RMP_DUP;
            o->bytes = src->bytes;
            atomic_store_explicit(&o->live, 1, memory_order_release);
            list_memory(b, o);
            add_where(b, RMP_DUP, (int64_t)src->bytes);
            event(b, 'D', o, d->hClient, d->hObject, t0, t1);
          }
        }
        return;
      }
      break;
    case RMP_NV_ESC_CHECK_VERSION_STR:
      if (size == RMP_VERSION_IOCTL_SIZE && atomic_load_explicit(&b->abi_major, RLX) == 0) {
        memcpy(b->version, (const char*)arg + 8, sizeof b->version);
        b->version[sizeof b->version - 1] = '\0';
        atomic_store_explicit(&b->abi_major, rmp_parse_major(b->version, sizeof b->version), RLX);
      }
      return;
    case RMP_NV_ESC_IOCTL_XFER_CMD:
      if (size == sizeof(struct rmp_xfer) && depth == 0) {
        const struct rmp_xfer* x = (const struct rmp_xfer*)arg;
        atomic_fetch_add_explicit(&b->xfer, 1, RLX);
        if (x->ptr != 0 && x->size <= RMP_MAX_IOCTL_SIZE && (x->cmd & 0xffu) != RMP_NV_ESC_IOCTL_XFER_CMD)
          decode(b, x->cmd & 0xffu, x->size, (void*)(uintptr_t)x->ptr, t0, t1, depth + 1);
        return;
      }
      break;
    default:
      return; /* MAP_MEMORY(_DMA), CONTROL...: counted and timed only, they move no memory in or out */
  }
  atomic_fetch_add_explicit(&b->undecoded, 1, RLX);
}

void rmp_account(struct rmp_books* b, int kind, unsigned long request, void* arg, int rc, uint64_t t0,
                 uint64_t t1) {
  const uint64_t ns = t1 > t0 ? t1 - t0 : 0;
  if (b == NULL) return;
  if (kind == RMP_FD_UVM) {
    atomic_fetch_add_explicit(&b->uvm_count, 1, RLX);
    atomic_fetch_add_explicit(&b->uvm_ns, ns, RLX);
    return;
  }
  if (kind == RMP_FD_NV_OTHER) {
    atomic_fetch_add_explicit(&b->nv_other_count, 1, RLX);
    atomic_fetch_add_explicit(&b->nv_other_ns, ns, RLX);
    return;
  }
  if (kind != RMP_FD_CTL && kind != RMP_FD_DEV) return;
  const unsigned nr = RMP_IOC_NR(request), size = RMP_IOC_SIZE(request);
  if (RMP_IOC_TYPE(request) != RMP_NV_IOCTL_MAGIC) atomic_fetch_add_explicit(&b->type_mismatch, 1, RLX);
  struct rmp_esc_stat* e = &b->esc[nr];
  atomic_fetch_add_explicit(&e->count, 1, RLX);
  atomic_fetch_add_explicit(&e->ns, ns, RLX);
  uint32_t first = 0;
  if (!atomic_compare_exchange_strong_explicit(&e->size_first, &first, size + 1, RLX, RLX) &&
      first != size + 1)
    atomic_store_explicit(&e->size_other, size + 1, RLX);
  if (rc != 0) {
    atomic_fetch_add_explicit(&e->sys_errors, 1, RLX);
    return;
  }
  if (arg == NULL) return;
  /* The RM status of the escapes whose struct the probe knows: last 32-bit field before any trailer. */
  uint32_t status = 0;
  int known = 1;
  switch (nr) {
    case RMP_NV_ESC_RM_ALLOC:
      if (size == 32)
        status = get32(arg, 28);
      else if (size == 48)
        status = get32(arg, 40);
      else
        known = 0;
      break;
    case RMP_NV_ESC_RM_FREE:
      known = size == 16;
      status = known ? get32(arg, 12) : 0;
      break;
    case RMP_NV_ESC_RM_ALLOC_MEMORY:
      known = size == 56;
      status = known ? get32(arg, 40) : 0;
      break;
    case RMP_NV_ESC_RM_VID_HEAP_CONTROL:
      known = size == RMP_NVOS32_SIZE;
      status = known ? get32(arg, 20) : 0;
      break;
    case RMP_NV_ESC_RM_CONTROL:
      known = size == 32;
      status = known ? get32(arg, 28) : 0;
      break;
    default:
      known = 0;
  }
  if (known && status != 0) {
    atomic_fetch_add_explicit(&e->rm_errors, 1, RLX);
    atomic_store_explicit(&e->last_rm_status, status, RLX);
  }
  const int major = atomic_load_explicit(&b->abi_major, RLX);
  if (major != 0 && major < 535 && nr != RMP_NV_ESC_CHECK_VERSION_STR) {
    /* NVOS21's paramsSize and NVOS64's layout differ before 535: count, do not decode. */
    atomic_fetch_add_explicit(&b->abi_skipped, 1, RLX);
    return;
  }
  decode(b, nr, size, arg, t0, t1, 0);
}

int rmp_deny(struct rmp_books* b, int kind, unsigned long request, void* arg, int64_t limit, uint64_t t) {
  if (kind != RMP_FD_CTL || arg == NULL || limit < 0) return 0;
  const unsigned nr = RMP_IOC_NR(request), size = RMP_IOC_SIZE(request);
  uint64_t want = 0;
  uint32_t status_off = 0, client = 0, handle = 0;
  if (nr == RMP_NV_ESC_RM_ALLOC && (size == sizeof(struct rmp_nvos21) || size == sizeof(struct rmp_nvos64))) {
    const struct rmp_nvos21* a = (const struct rmp_nvos21*)arg;
    const struct rmp_nvos64* a64 = (const struct rmp_nvos64*)arg;
    const int finn = size != 32 && (a64->flags & RMP_NVOS64_FLAGS_FINN_SERIALIZED) != 0;
    uint32_t params_size = finn ? 0 : size == 32 ? a->paramsSize : a64->paramsSize;
    if (params_size == 0 && !finn) params_size = class_param_size(a->hClass); /* as decode_rm_alloc */
    if (a->hClass != RMP_NV01_MEMORY_LOCAL_USER || a->pAllocParms == 0 || params_size < RMP_MEMPARAMS_MIN)
      return 0;
    want = get64((const void*)(uintptr_t)a->pAllocParms, RMP_MEMPARAMS_OFF_SIZE);
    status_off = size == 32 ? 28 : 40;
    client = a->hRoot, handle = a->hObjectNew;
  } else if (nr == RMP_NV_ESC_RM_VID_HEAP_CONTROL && size == RMP_NVOS32_SIZE) {
    const uint32_t fn = get32(arg, RMP_NVOS32_OFF_FUNCTION);
    if (fn != RMP_NVOS32_FUNCTION_ALLOC_SIZE && fn != RMP_NVOS32_FUNCTION_ALLOC_SIZE_RANGE &&
        fn != RMP_NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT)
      return 0;
    const uint32_t attr =
        get32(arg, fn == RMP_NVOS32_FUNCTION_ALLOC_TILED_PITCH_HEIGHT ? RMP_NVOS32_OFF_ATTR_TILED
                                                                      : RMP_NVOS32_OFF_ATTR);
    if (mem_where(0, attr, get32(arg, RMP_NVOS32_OFF_FLAGS)) != RMP_LOCAL) return 0;
    want = get64(
        arg, fn == RMP_NVOS32_FUNCTION_ALLOC_SIZE_RANGE ? RMP_NVOS32_OFF_SIZE_RANGE : RMP_NVOS32_OFF_SIZE);
    status_off = RMP_NVOS32_OFF_STATUS;
    client = get32(arg, 0), handle = get32(arg, RMP_NVOS32_OFF_HMEMORY);
  } else {
    return 0;
  }
  if (atomic_load_explicit(&b->local_bytes, RLX) + (int64_t)want <= limit) return 0;
  const uint32_t st = RMP_NV_ERR_NO_MEMORY;
  memcpy((char*)arg + status_off, &st, sizeof st);
  atomic_fetch_add_explicit(&b->denied, 1, RLX);
  atomic_fetch_add_explicit(&b->denied_bytes, want, RLX);
  struct rmp_object shadow = {0};
  shadow.cls = RMP_NV01_MEMORY_LOCAL_USER;
  shadow.where = RMP_LOCAL;
  shadow.bytes = want;
  event(b, 'R', &shadow, client, handle, t, t);
  return 1;
}
