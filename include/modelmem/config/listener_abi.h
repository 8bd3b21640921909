/* The allocation events a pluggable library (libmodelmem_npu_alloc.so, libmodelmem_cuda_alloc.so)
 * hands to the listeners registered with modelmem_npu_add_listener / modelmem_cuda_add_listener
 * (docs/ascend.md, "Listening to allocations"). Plain C, for C callers and ctypes. */
#ifndef MODELMEM_CONFIG_LISTENER_ABI_H
#define MODELMEM_CONFIG_LISTENER_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MODELMEM_EVENT_VERSION 1

/* kind */
#define MODELMEM_EVENT_ALLOC 0         /* a block handed to the framework */
#define MODELMEM_EVENT_FREE 1          /* a block returned by the framework */
#define MODELMEM_EVENT_SEGMENT_ALLOC 2 /* memory obtained from the device */
#define MODELMEM_EVENT_SEGMENT_FREE 3  /* memory returned to the device */
#define MODELMEM_EVENT_MAP 4           /* physical pages mapped (expandable segments) */
#define MODELMEM_EVENT_UNMAP 5         /* physical pages unmapped */
#define MODELMEM_EVENT_OOM 6           /* an allocation failed */
#define MODELMEM_EVENT_MARK 7          /* a step mark; `label` says which */

/* One event. Valid only during the callback: copy what you keep. Later versions only append
 * fields. */
typedef struct modelmem_event {
  uint32_t version;        /* MODELMEM_EVENT_VERSION */
  uint32_t kind;           /* MODELMEM_EVENT_* */
  int32_t device;          /* the device index (npu:N, cuda:N) */
  uint32_t pool;           /* 0: the process's own stack; i + 1: the i-th pool of pools:[...] */
  uint64_t time_ns;        /* steady clock (CLOCK_MONOTONIC), nanoseconds */
  uint64_t address;        /* the block, segment or range; 0 for an OOM and a mark */
  uint64_t size;           /* alloc and OOM: bytes requested; free: the block's bytes; segment,
                              map, unmap: their bytes */
  void* stream;            /* the framework's stream (aclrtStream, cudaStream_t); NULL for none */
  uint64_t thread;         /* the calling thread (modelmem's thread id) */
  const char* device_name; /* "npu:0", "cuda:1": valid as long as the process lives */
  const char* pool_name;   /* the pool as `modelmem info` shows it (MODELMEM_POOL_NAME, "npu",
                              "pytorch", or the name in pools:[...]): valid as long as the process
                              lives */
  const char* label;       /* MODELMEM_EVENT_MARK: "step_begin", "step_end"; otherwise NULL */
} modelmem_event;

/* A listener: called on the allocating (or freeing) thread, synchronously, possibly while the
 * allocator holds its lock. It must be quick, must not throw, must not allocate or free through
 * the same library, and must not call *_remove_listener; `user` is what was registered. */
typedef void (*modelmem_event_fn)(const modelmem_event* event, void* user);

#ifdef __cplusplus
}
#endif

#endif
