/* zyfa_core's C API: what native callers (zyfa-torch's C++ op zyfa._C) call in zyfa_core._driver's
 * shared object, without Python. Plain C types only. A caller dlopens the shared object by its path
 * (zyfa_core._driver.__file__; it is already loaded by then, so RTLD_NOLOAD finds it), resolves these
 * names with dlsym and checks zyfa_core_api_version() against ZYFA_CORE_API_VERSION, which changes
 * whenever a signature or struct here changes.
 *
 * Every entry returns 0, or non-zero with `error` filled; none throws, none needs the GIL.
 */
#ifndef ZYFA_CORE_API_H
#define ZYFA_CORE_API_H

#include <stddef.h>

#include "zyfa_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 3: zyfa_check_varlen, the int32 / float32 dtype codes, and zyfa_plan_launch's `varlen` argument.
 * 4: zyfa_varlen_args of ABI 5 (item_counter; 80 bytes), which zyfa_plan_launch takes.
 * 5: zyfa_plan_workspace_bytes takes `varlen` too (a packed kernel's V pre-pass sizes by its total_k). */
#define ZYFA_CORE_API_VERSION 5

/* Exported even though the extension is built with -fvisibility=hidden: callers find these with dlsym. */
#define ZYFA_CORE_EXPORT __attribute__((visibility("default")))

/* error->kind: which Python exception the failure maps to. */
#define ZYFA_ERROR_VALUE 1  /* ValueError: a refused argument */
#define ZYFA_ERROR_TYPE 2   /* TypeError */
#define ZYFA_ERROR_DRIVER 3 /* zyfa_core.errors.ZyfaDriverError: kernel, call, error_name and code are set */

typedef struct zyfa_core_error {
  int kind;             /* ZYFA_ERROR_* */
  long code;            /* the driver's error code (0 when not from a driver call) */
  char kernel[128];     /* kernel key */
  char call[128];       /* driver entry point (or "launch" for a size mismatch) */
  char error_name[64];  /* e.g. "CUDA_ERROR_LAUNCH_FAILED" */
  char message[1024];   /* "<kernel>: <call> failed with <error_name> (<code>): <text>", or the refusal */
} zyfa_core_error;

ZYFA_CORE_EXPORT int zyfa_core_api_version(void);

/* A tensor as the checks see it: torch-free, filled by the caller from its tensor type. */
#define ZYFA_DTYPE_OTHER 0
#define ZYFA_DTYPE_BF16 1
#define ZYFA_DTYPE_E4M3FN 2
#define ZYFA_DTYPE_INT32 3   /* index tensors of packed batches (cu_seqlens, seqused_k, page_table) */
#define ZYFA_DTYPE_FLOAT32 4 /* descale tables */

typedef struct zyfa_tensor_view {
  int dim;                      /* rank */
  const long long *sizes;       /* dim values */
  const long long *strides;     /* dim values, in elements */
  long long element_size;       /* bytes */
  long long storage_offset;     /* elements (messages only) */
  int dtype;                    /* ZYFA_DTYPE_* */
  const char *dtype_name;       /* the caller's name of its dtype, for messages, e.g. "torch.float16" */
  const char *device;           /* the caller's name of its device, compared and named, e.g. "cuda:0" */
  unsigned long long address;   /* the data pointer, checked for alignment when address_known */
  int address_known;            /* 0 where no data exists yet (a traced FakeTensor) */
} zyfa_tensor_view;

/* The problem sizes of one call (flash-attn layout). */
typedef struct zyfa_call_dims {
  long long batch, seqlen_q, seqlen_k, heads_q, heads_kv, d_qk, d_v;
} zyfa_call_dims;

/* q, k, v of one call: rank 4, one supported dtype, matching shapes (GQA/MQA heads), supported head dims,
 * grid and int32 limits, one device, head_dim contiguous and rows 16-byte aligned. Fills `dims`. */
ZYFA_CORE_EXPORT int zyfa_check_tensors(const zyfa_tensor_view *q, const zyfa_tensor_view *k,
                                        const zyfa_tensor_view *v, zyfa_call_dims *dims, zyfa_core_error *error);

/* The index tensors and sizes of a packed (variable-length) call; NULL views are absent tensors. */
typedef struct zyfa_varlen_views {
  const zyfa_tensor_view *cu_seqlens_q; /* int32 [batch + 1], required */
  const zyfa_tensor_view *cu_seqlens_k; /* int32 [batch + 1]; may be NULL with page_table and seqused_k */
  const zyfa_tensor_view *seqused_k;    /* int32 [batch] */
  const zyfa_tensor_view *page_table;   /* int32 [batch, max_pages]: k and v are [num_pages, page_size, heads_kv, d] */
  const zyfa_tensor_view *descales;     /* float32 [3, batch, heads_kv]: q, k, v descales per sequence and kv head */
  long long max_seqlen_q, max_seqlen_k; /* bounds of every sequence's query and key counts */
  int values_readable; /* 1: the index tensors' addresses are host memory: their values are checked too */
} zyfa_varlen_views;

/* The sizes of a packed call. */
typedef struct zyfa_varlen_dims {
  long long batch, total_q, total_k, heads_q, heads_kv, d_qk, d_v;
  long long page_size, num_pages, max_pages; /* 0 without a page table; total_k = num_pages * page_size then */
} zyfa_varlen_dims;

/* A packed call: q [total_q, heads_q, d_qk]; k, v [total_k, heads_kv, d] or, with a page table,
 * [num_pages, page_size, heads_kv, d]; dtypes, heads and head dims as zyfa_check_tensors; the index tensors'
 * dtypes, shapes, layout and device; max_seqlen_q/k in 0..int32; batch <= 65535. With values_readable, also
 * the values: cu_seqlens non-decreasing within the rows of q (k), every count <= its max_seqlen, seqused_k
 * within the packed rows or the pages of its table row, and the pages used in 0..num_pages-1. Fills `dims`. */
ZYFA_CORE_EXPORT int zyfa_check_varlen(const zyfa_tensor_view *q, const zyfa_tensor_view *k, const zyfa_tensor_view *v,
                                       const zyfa_varlen_views *varlen, zyfa_varlen_dims *dims, zyfa_core_error *error);

/* The op's scalars, checked as the kernels take them (float32): softmax_scale finite and non-zero,
 * descales finite and > 0 (1.0 for bf16), and the one factor the kernels fold them into (softmax_scale *
 * q_descale * k_descale * log2(e) for FP8, softmax_scale * log2(e) for bf16) finite and non-zero, all
 * after rounding to float32. `who` prefixes the message ("zyfa", or a kernel name). On success
 * `narrowed` holds softmax_scale, q_descale, k_descale, v_descale as float32. */
ZYFA_CORE_EXPORT int zyfa_check_scalars(const char *who, int fp8, double softmax_scale, const double descales[3],
                       float narrowed[4], zyfa_core_error *error);

/* p_mode: NULL (None: the kernel's default) or "exact" / "lean" / "f16", FP8 only. `index` gets 0 for
 * NULL, else 1 + its position in that list. */
ZYFA_CORE_EXPORT int zyfa_check_p_mode(int fp8, const char *p_mode, int *index, zyfa_core_error *error);

/* A launch plan loaded on one device (plan.h): zyfa_core.launcher.native_plan(spec, device) returns its
 * handle, valid for the life of the process (zyfa_core keeps every loaded plan). `args` is the filled
 * argument struct (zyfa_abi.h); the plan checks it as zyfa_core.check_args does before any driver call. */

/* The device workspace one launch of `args` needs (the V pre-pass's pre-transposed V, a grid "dynamic"
 * kernel's item counter), 0 for none. `varlen` as for zyfa_plan_launch (a packed kernel's V pre-pass needs it). */
ZYFA_CORE_EXPORT int zyfa_plan_workspace_bytes(const void *plan, const zyfa_fwd_args *args,
                                               const zyfa_varlen_args *varlen, unsigned long long *bytes,
                                               zyfa_core_error *error);

/* Checks `args` and launches on `stream` (the raw CUstream / hipStream_t): the V pre-pass into `workspace`
 * (a 16-byte aligned device pointer to zyfa_plan_workspace_bytes bytes, which must stay allocated until the
 * work on `stream` has run; 0 without a pass), then the kernel, with its TMA maps for a "tma" kernel.
 * `varlen` is the packed batch's zyfa_varlen_args (args.flags has ZYFA_FLAG_VARLEN) or NULL for a dense call. */
ZYFA_CORE_EXPORT int zyfa_plan_launch(const void *plan, const zyfa_fwd_args *args, const zyfa_varlen_args *varlen,
                                      void *stream, unsigned long long workspace, zyfa_core_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ZYFA_CORE_API_H */
