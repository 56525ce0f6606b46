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

/* 1: first layout (2026-12-01). 2: adds zyfa_tma_maps, the second parameter of kernels whose manifest
 * row says "loads": "tma" (zyfa_fwd_args unchanged). 3: adds the V pre-pass (2026-12-03): a kernel whose
 * manifest row names a "v_prep" entry reads V pre-transposed. The launcher first runs that entry,
 * `<kernel>_vprep(zyfa_fwd_args args, uint8_t *vt)` (args as for the kernel; block 256 threads, no dynamic
 * shared memory, grid (vt_row_bytes / 128, heads_kv, batch)), which writes Vt [batch][heads_kv][d_v]
 * [vt_row_bytes] bytes into the workspace `vt` (vt_row_bytes = seqlen_k rounded up to a multiple of
 * lcm(tile_n, 128); 16-byte aligned), then the kernel with the same args but v = vt (v's strides unread).
 * zyfa_fwd_args unchanged. 4: packed variable-length batches and paged K/V (2026-12-06): flags
 * ZYFA_FLAG_VARLEN / _PAGED / _DESCALE_TABLE and zyfa_varlen_args, the second parameter of kernels whose
 * manifest row has "layout" "varlen" or "paged" (zyfa_fwd_args unchanged: dense kernels take what they took).
 * 5: zyfa_varlen_args.item_counter (2026-12-06), the work counter of packed kernels whose manifest row has
 * "grid" "dynamic"; the struct grows from 72 to 80 bytes. 6 (2026-12-06): a "varlen" kernel whose row says
 * "loads": "tma" takes zyfa_tma_maps as a THIRD parameter, after zyfa_varlen_args, its maps over the packed
 * tensors (below); a "varlen" kernel may name a "v_prep" entry, which takes zyfa_varlen_args too and writes
 * the packed Vt layout (ZYFA_VT_PACKED_*, below); no struct changes. 7 (2026-12-07): a kernel whose row has
 * both "loads": "tma" and a "v_prep" entry reads Vt tiles by TMA: its v map describes the pre-pass's Vt in
 * the workspace (below), not v; no struct changes. */
#define ZYFA_ABI_VERSION 7

#define ZYFA_FLAG_CAUSAL 0x1u /* apply the causal mask */
#define ZYFA_FLAG_LSE 0x2u    /* write log-sum-exp to `lse` */
#define ZYFA_FLAG_VARLEN 0x4u /* a packed batch: rows and lengths from zyfa_varlen_args (see below) */
#define ZYFA_FLAG_PAGED 0x8u  /* with VARLEN: K/V rows through zyfa_varlen_args.page_table */
#define ZYFA_FLAG_DESCALE_TABLE 0x10u /* with VARLEN, FP8: descales per (sequence, kv head) from .descales */

/* The largest running-max staleness (a manifest row's "stale_tau", log2 units; exclusive) an FP8 kernel may
 * declare: its P = 2^(t - m + 8) must stay below e4m3's 448 = 2^8.81 when t exceeds the kept max m by up to
 * stale_tau (lean P: code 120 + 8 tau <= 126). The sm90 kernel, the kernel build tool and (mirrored,
 * tests/test_abi.py) zyfa_core all check it from here. */
#define ZYFA_FP8_MAX_STALE_TAU 0.8

/* ABI 3's V pre-pass (the version note above): each of its blocks takes ZYFA_VPREP_KEYS keys of one (kv head,
 * batch) with ZYFA_VPREP_THREADS threads, and a Vt row is seqlen_k (at least 1) rounded up to a multiple of
 * ZYFA_VT_PAD(tile_n) = lcm(tile_n, ZYFA_VPREP_KEYS) bytes, for the tile_n (multiples of 64) it is built for.
 * The kernel, zyfa-torch's C++ op and (mirrored, tests/test_abi.py) zyfa_core all size it from these. */
#define ZYFA_VPREP_KEYS 128
#define ZYFA_VPREP_THREADS 256
#define ZYFA_VT_PAD(tile_n) ((tile_n) % ZYFA_VPREP_KEYS == 0 ? (tile_n) : 2 * (tile_n))
#define ZYFA_VT_ROW_BYTES(seqlen_k, tile_n) \
  (((int64_t)((seqlen_k) > 0 ? (seqlen_k) : 1) + ZYFA_VT_PAD(tile_n) - 1) / ZYFA_VT_PAD(tile_n) * ZYFA_VT_PAD(tile_n))

/* ABI 6's V pre-pass of a packed ("varlen") kernel: `<kernel>_vprep(zyfa_fwd_args args, zyfa_varlen_args varlen,
 * uint8_t *vt)` (block ZYFA_VPREP_THREADS threads, no dynamic shared memory, grid (row bytes / ZYFA_VPREP_KEYS,
 * heads_kv, 1)) writes Vt [heads_kv][d_v][ZYFA_VT_PACKED_ROW_BYTES(batch, total_k)] bytes: sequence b's keys
 * (as the kernel counts them, zyfa_varlen_args below) from column ZYFA_VT_PACKED_COLUMN(b, cu_seqlens_k[b]), a
 * multiple of 16, every other column zero. Columns of consecutive sequences start at least len + 129 apart,
 * so a KV block of up to 128 keys read from a sequence's column never meets the next sequence's keys; the row
 * ends at least 128 columns past the last sequence's keys. For kernels with tile_n <= 128. */
#define ZYFA_VT_PACKED_GAP 144
#define ZYFA_VT_PACKED_COLUMN(b, k_start) ((int64_t)(b) * ZYFA_VT_PACKED_GAP + ((int64_t)(k_start) + 15) / 16 * 16)
#define ZYFA_VT_PACKED_ROW_BYTES(batch, total_k)                                                              \
  (((int64_t)(batch) * ZYFA_VT_PACKED_GAP + (int64_t)(total_k) + 128 + ZYFA_VPREP_KEYS - 1) / ZYFA_VPREP_KEYS * \
   ZYFA_VPREP_KEYS)

/* Packing: every field sits at its natural alignment, so pack 1 and pack 8 give the same layout (the
 * static_asserts below and tests/test_abi.py check it). With pack 1, nvcc also gives the struct
 * alignment 1 and reads each kernel-parameter field byte by byte (the sm90 FP8 kernel: 173 LDC.U8 and
 * 272 more instructions than with pack 8, at kernel start and per persistent item), yet pack 8 timed
 * 0.965..1.014 of pack 1 on the H200 (kernels/sm90/NOTES.md, "What was tried"): not worth an ABI change. */
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
#define ZYFA_ABI_ASSERT static_assert
#else
#define ZYFA_ABI_ASSERT _Static_assert
#endif
ZYFA_ABI_ASSERT(sizeof(zyfa_fwd_args) == 192, "zyfa_fwd_args must be 192 bytes");
/* The layout is the same under either packing: fields at their documented offsets. */
#define ZYFA_ABI_AT(field, offset) (__builtin_offsetof(zyfa_fwd_args, field) == (offset))
ZYFA_ABI_ASSERT(ZYFA_ABI_AT(lse, 32) && ZYFA_ABI_AT(q_stride_batch, 40) &&
                    ZYFA_ABI_AT(out_stride_head, 128) && ZYFA_ABI_AT(batch, 136) &&
                    ZYFA_ABI_AT(seqlen_q, 148) && ZYFA_ABI_AT(flags, 164) && ZYFA_ABI_AT(v_descale, 180) &&
                    ZYFA_ABI_AT(reserved, 184),
                "zyfa_fwd_args field offsets");
#undef ZYFA_ABI_AT
#undef ZYFA_ABI_ASSERT

/* TMA tensor maps: the LAST parameter of kernels whose manifest row says "loads": "tma" (sm90a): the second
 * of a dense kernel, right after zyfa_fwd_args (parameter offset 192, 64-byte aligned; 640 parameter bytes
 * in all), the third of a "varlen" kernel, after zyfa_varlen_args (offset 320; 768 bytes in all). Each map
 * is a CUtensorMap that the launcher encodes on the host with cuTensorMapEncodeTiled over the 4-d tensor
 * (d, seq, head, batch) of q, k or v:
 *   dims    {d (d_qk for q and k, d_v for v), seqlen (seqlen_q for q, seqlen_k for k and v), heads
 *            (heads_q for q, heads_kv for k and v), batch}; a packed batch is one sequence of all its rows:
 *            seqlen total_q for q and total_k for k and v, batch 1
 *   strides {stride_seq, stride_head, stride_batch} x element size, in bytes (packed: the batch stride is
 *            the tensor's rows x stride_seq, never stepped over)
 *   box     {128 bytes (64 bf16 / 128 e4m3 elements), rows, 1, 1}, rows = the manifest's tile_m for q and
 *            tile_n for k and v; element strides all 1
 *   bf16 (e4m3: uint8) element type, no interleave, 128-byte swizzle, L2 promotion 256 B, out-of-bounds fill zeros.
 * A kernel with a V pre-pass (ABI 7) takes as v the pass's Vt (the workspace): dims {Vt row bytes, d_v,
 * heads_kv, planes (a dense call's batch, 1 for a packed batch)}, strides {row, d_v x row, heads_kv x d_v x
 * row} bytes, box {128, d_v, 1, 1}.
 * valid = 0: the maps are unset and the kernel loads with cp.async instead. Launchers set 0 (all bytes
 * zero) when a q / k / v pointer or any of their strides in bytes is not a multiple of 16. */
typedef struct __attribute__((aligned(64))) zyfa_tensor_map {
  uint64_t opaque[16]; /* CUtensorMap */
} zyfa_tensor_map;

typedef struct __attribute__((aligned(64))) zyfa_tma_maps {
  zyfa_tensor_map q;    /*   0 */
  zyfa_tensor_map k;    /* 128 */
  zyfa_tensor_map v;    /* 256 */
  int32_t valid;        /* 384  1: the maps above are encoded; 0: load with cp.async */
  int32_t reserved[15]; /* 388  zero */
} zyfa_tma_maps;        /* 448 bytes */

#ifdef __cplusplus
static_assert(sizeof(zyfa_tma_maps) == 448, "zyfa_tma_maps must be 448 bytes");
#else
_Static_assert(sizeof(zyfa_tma_maps) == 448, "zyfa_tma_maps must be 448 bytes");
#endif

/* Packed variable-length batches (ABI 4): the second parameter of kernels whose manifest row has "layout"
 * "varlen" or "paged" (a "varlen" kernel with "loads" "tma" takes the maps third, ABI 6); args.flags then
 * has ZYFA_FLAG_VARLEN. Dense kernels take no such parameter. In zyfa_fwd_args of such a call:
 *   batch     the number of sequences; seqlen_q / seqlen_k their bounds (max_seqlen_q / max_seqlen_k), which
 *             every count is clamped to (the grid: below)
 *   q, out    [total_q, heads, d]: *_stride_batch is 0; sequence b's rows are cu_seqlens_q[b] .. [b+1] - 1
 *   k, v      packed [total_k, heads_kv, d] (rows cu_seqlens_k[b] ..; *_stride_batch 0), or with
 *             ZYFA_FLAG_PAGED a cache [num_pages, page_size, heads_kv, d]: *_stride_batch is the page stride,
 *             key j of sequence b is slot j % page_size of page page_table[b * page_table_stride + j / page_size],
 *             j < max_pages * page_size
 *   lse       float32 [heads_q, total_q] (flash-attn's varlen layout)
 * Sequence b has len_q = cu_seqlens_q[b+1] - cu_seqlens_q[b] queries and len_k = seqused_k[b] (when
 * non-NULL) or cu_seqlens_k[b+1] - cu_seqlens_k[b] keys; causal masking is bottom-right per sequence
 * (row i sees key j iff j <= i + len_k - len_q). Launchers guarantee len_q <= seqlen_q and len_k <=
 * seqlen_k only where the values are on the host; kernels clamp to them (no read or write outside q, k,
 * v, out as sized by total_q, total_k / num_pages). Rows of q outside every sequence are not written.
 * DESCALE_TABLE: descales[(t * batch + b) * heads_kv + h] for t = 0 (q), 1 (k), 2 (v) replaces the
 * per-tensor q/k/v_descale of sequence b, kv head h (query head h' takes kv head h' / (heads_q / heads_kv)).
 * Work items: ZYFA_VARLEN_TILES(total_q, batch, seqlen_q, tile_m) x heads_q (query tile, head) pairs, the
 * first factor an upper bound on the query tiles of all sequences, sum_b ceil(len_q(b) / tile_m), from host
 * values only (cu_seqlens_q stays on the device): each sequence adds at most one partial tile to
 * floor(total_q / tile_m), and none has more than ceil(seqlen_q / tile_m). Grid: (min(SMs, items), 1, 1)
 * for a "persistent" row, each block walking its items; (ZYFA_VARLEN_TILES(...), heads_q, 1) for a
 * "tiles" row, one item per block. The kernel maps items onto the tiles it finds in cu_seqlens_q; items
 * past the last tile are not computed. A "batch_tiles" row (packed layouts only) instead takes the dense
 * grid of the bounds, (ceil(seqlen_q / tile_m), heads_q, batch): block (x, y, z) computes query tile x of
 * head y of sequence z and exits when that tile starts past the sequence's queries. A "dynamic" row
 * launches the persistent grid, but its blocks claim items from a counter instead of a fixed stride: block
 * x takes item x first, then gridDim.x + atomicAdd(item_counter, 1) each time it needs one, so the items
 * still go out in rank order while a block that finishes early takes more. Launchers point item_counter at
 * the first 4 of the last ZYFA_ITEM_COUNTER_BYTES (below) of the launch's workspace, after any
 * pre-transposed V, and clear them on the launch's stream right before the kernel; the kernel leaves them
 * at the number of claims made.
 * Kernel parameters: zyfa_fwd_args, then this struct; in a HIP kernarg segment at offset 192 (8-byte
 * aligned), 272 bytes in all. */
#define ZYFA_VARLEN_TILES(total_q, batch, max_seqlen_q, tile_m)                                       \
  ((int64_t)(total_q) / (tile_m) + (int64_t)(batch) <                                                 \
           (int64_t)(batch) * (((int64_t)(max_seqlen_q) + (tile_m) - 1) / (tile_m))                   \
       ? (int64_t)(total_q) / (tile_m) + (int64_t)(batch)                                             \
       : (int64_t)(batch) * (((int64_t)(max_seqlen_q) + (tile_m) - 1) / (tile_m)))

/* ABI 5: the bytes at the end of a grid "dynamic" launch's workspace that hold its item counter (above). */
#define ZYFA_ITEM_COUNTER_BYTES 16

typedef struct zyfa_varlen_args {
  const int32_t *cu_seqlens_q; /*  0  [batch + 1] */
  const int32_t *cu_seqlens_k; /*  8  [batch + 1]; NULL only with PAGED and seqused_k */
  const int32_t *seqused_k;    /* 16  [batch] or NULL */
  const int32_t *page_table;   /* 24  [batch][page_table_stride], PAGED only */
  const float *descales;       /* 32  [3][batch][heads_kv], DESCALE_TABLE only */
  int64_t page_table_stride;   /* 40  elements from one sequence's page row to the next */
  int32_t page_size;           /* 48  keys per page (PAGED), else 0 */
  int32_t num_pages;           /* 52  pages of the cache (PAGED), else 0 */
  int32_t max_pages;           /* 56  pages in each sequence's row of page_table (PAGED), else 0 */
  int32_t total_q;             /* 60  rows of q and out */
  int32_t total_k;             /* 64  rows of packed k and v, or num_pages * page_size */
  uint32_t reserved;           /* 68  zero */
  uint32_t *item_counter;      /* 72  grid "dynamic": one uint32, zero at launch (below); else NULL */
} zyfa_varlen_args;            /* 80 bytes */

#ifdef __cplusplus
static_assert(sizeof(zyfa_varlen_args) == 80, "zyfa_varlen_args must be 80 bytes");
#else
_Static_assert(sizeof(zyfa_varlen_args) == 80, "zyfa_varlen_args must be 80 bytes");
#endif

#endif /* ZYFA_ABI_H */
