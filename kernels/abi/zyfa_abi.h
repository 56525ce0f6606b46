/* ZYFA kernel ABI: the single argument of every ZYFA attention kernel, on every architecture.
 *
 * HIP and CUDA kernels take `zyfa_fwd_args` by value; the generated gfx950 assembly reads it at the
 * byte offsets noted on each field from the kernarg segment. `zyfa_core.abi` mirrors this struct
 * with ctypes and a test compares every offset and the size with the host compiler's view.
 *
 * Tensor layout is flash-attn's: q [batch, seqlen_q, heads_q, d_qk], k [batch, seqlen_k, heads_kv,
 * d_qk], v [batch, seqlen_k, heads_kv, d_v], out [batch, seqlen_q, heads_q, d_v]. Strides are in
 * ELEMENTS (not bytes) and 64-bit; the last dimension (head_dim) is always contiguous (stride 1).
 * lse, when flags has ZYFA_FLAG_LSE, is float32 [batch, heads_q, seqlen_q], contiguous, in natural
 * log units of the softmax-scaled scores. Causal masking follows flash-attn (bottom-right aligned):
 * query row i sees key j iff j <= i + seqlen_k - seqlen_q.
 *
 * Changing anything here bumps ZYFA_ABI_VERSION (the manifest records it; the loader checks it).
 */
#ifndef ZYFA_ABI_H
#define ZYFA_ABI_H

#if defined(__HIP_DEVICE_COMPILE__) || defined(__AMDGCN__)
/* amdgcn device code is compiled with -nogpulib -nogpuinc, and the pinned ziglang clang ships no
 * builtin headers, so <stdint.h> exists only if the host has libc headers. The compiler's own type
 * macros name the same types (a repeated identical typedef is fine where stdint.h was included). */
typedef __INT32_TYPE__ int32_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT64_TYPE__ uint64_t;
#else
#include <stdint.h>
#endif

/* 1: first layout (2026-12-01). */
#define ZYFA_ABI_VERSION 1

#define ZYFA_FLAG_CAUSAL 0x1u /* apply the causal mask */
#define ZYFA_FLAG_LSE 0x2u    /* write log-sum-exp to `lse` */

#pragma pack(push, 1)
typedef struct zyfa_fwd_args {
  const void *q;             /*   0 */
  const void *k;             /*   8 */
  const void *v;             /*  16 */
  void *out;                 /*  24 */
  float *lse;                /*  32  NULL unless ZYFA_FLAG_LSE */
  int64_t q_stride_batch;    /*  40 */
  int64_t q_stride_seq;      /*  48 */
  int64_t q_stride_head;     /*  56 */
  int64_t k_stride_batch;    /*  64 */
  int64_t k_stride_seq;      /*  72 */
  int64_t k_stride_head;     /*  80 */
  int64_t v_stride_batch;    /*  88 */
  int64_t v_stride_seq;      /*  96 */
  int64_t v_stride_head;     /* 104 */
  int64_t out_stride_batch;  /* 112 */
  int64_t out_stride_seq;    /* 120 */
  int64_t out_stride_head;   /* 128 */
  int32_t batch;             /* 136 */
  int32_t heads_q;           /* 140 */
  int32_t heads_kv;          /* 144  heads_q % heads_kv == 0 (GQA/MQA) */
  int32_t seqlen_q;          /* 148 */
  int32_t seqlen_k;          /* 152 */
  int32_t d_qk;              /* 156 */
  int32_t d_v;               /* 160 */
  uint32_t flags;            /* 164  ZYFA_FLAG_* */
  float softmax_scale;       /* 168  natural-log units, e.g. 1/sqrt(d_qk) */
  float q_descale;           /* 172  FP8: q ~= q8 * q_descale; 1.0 for BF16 */
  float k_descale;           /* 176 */
  float v_descale;           /* 180 */
  uint64_t reserved;         /* 184  zero; keeps the size a multiple of 8 */
} zyfa_fwd_args;             /* 192 bytes */
#pragma pack(pop)

#ifdef __cplusplus
static_assert(sizeof(zyfa_fwd_args) == 192, "zyfa_fwd_args must be 192 bytes");
#else
_Static_assert(sizeof(zyfa_fwd_args) == 192, "zyfa_fwd_args must be 192 bytes");
#endif

#endif /* ZYFA_ABI_H */
