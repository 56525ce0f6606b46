// fa_fwd_wgmma: the compile-time configuration of one variant and its shared-memory layout.
//
// The build (kernels/tools/zyfa_kernel_build.py, from a kernels/variants.bzl entry) passes the variant as
// -D macros: ZYFA_KERNEL_NAME, ZYFA_DTYPE_E4M3, ZYFA_D_QK, ZYFA_D_V, ZYFA_TILE_M, ZYFA_TILE_N, ZYFA_THREADS,
// ZYFA_SMEM_BYTES, ZYFA_LEAN_P, and only where the entry asks for them ZYFA_WS_PV_F16 (p_mode "f16"),
// ZYFA_WS_PERSISTENT (grid "persistent"), ZYFA_WS_TMA (loads "tma"), ZYFA_WS_STALE_TAU (stale_tau > 0) and
// ZYFA_WS_VPRE (v_prep), ZYFA_WS_VARLEN (layout "varlen" 1, "paged" 2), ZYFA_WS_SEQ_MAJOR (tile_order
// "sequence_major"), ZYFA_WS_DYNAMIC (grid "dynamic", with ZYFA_WS_PERSISTENT) and ZYFA_WS_Q_TILES (q_tiles). Everything else below is a constexpr derived from them: the per-variant choices
// (softmax form, row-max method, row-sum method, ring depth, register split) are the ones measured fastest
// for that variant (kernels/sm90/NOTES.md, "What was tried", lists what was measured against them).
#pragma once

#include <stdint.h>

#include "abi/zyfa_abi.h"
#include "sm90/wgmma.h"

#if !defined(ZYFA_KERNEL_NAME) || !defined(ZYFA_DTYPE_E4M3) || !defined(ZYFA_D_QK) || \
    !defined(ZYFA_D_V) || !defined(ZYFA_TILE_M) || !defined(ZYFA_TILE_N) ||              \
    !defined(ZYFA_THREADS) || !defined(ZYFA_SMEM_BYTES) || !defined(ZYFA_LEAN_P)
#error "fa_fwd_wgmma.cu needs -DZYFA_KERNEL_NAME, ZYFA_DTYPE_E4M3, ZYFA_D_QK, ZYFA_D_V, ZYFA_TILE_M, ZYFA_TILE_N, ZYFA_THREADS, ZYFA_SMEM_BYTES, ZYFA_LEAN_P"
#endif
#ifndef ZYFA_WS_PV_F16
#define ZYFA_WS_PV_F16 0
#endif
#ifndef ZYFA_WS_PERSISTENT
#define ZYFA_WS_PERSISTENT 0
#endif
#ifndef ZYFA_WS_TMA
#define ZYFA_WS_TMA 0
#endif
#ifndef ZYFA_WS_STALE_TAU
#define ZYFA_WS_STALE_TAU 0
#endif
#ifndef ZYFA_WS_VPRE
#define ZYFA_WS_VPRE 0
#endif
#ifndef ZYFA_WS_VARLEN
#define ZYFA_WS_VARLEN 0
#endif
#ifndef ZYFA_WS_SEQ_MAJOR
#define ZYFA_WS_SEQ_MAJOR 0
#endif
#ifndef ZYFA_WS_DYNAMIC
#define ZYFA_WS_DYNAMIC 0
#endif
#ifndef ZYFA_WS_Q_TILES
#define ZYFA_WS_Q_TILES 1
#endif

namespace zyfa_sm90_ws {

// ---- the variant (build macros)
constexpr bool kFp8 = ZYFA_DTYPE_E4M3 != 0;
constexpr bool kLeanP = ZYFA_LEAN_P != 0;
// Persistent CTAs (grid (SMs, 1, 1)): each CTA walks a static list of (q tile, head, batch) items
// (scheduler.cuh); otherwise one CTA per q tile on the grid (ceil(seqlen_q / 128), heads_q, batch).
constexpr bool kPersistent = ZYFA_WS_PERSISTENT != 0;
// Q / K (and V: kTmaV) by TMA from one producer thread; the kernel then takes zyfa_tma_maps as its last
// parameter (maps.valid == 0, i.e. unaligned pointers or strides, keeps the cp.async path).
[[maybe_unused]] constexpr bool kTma = ZYFA_WS_TMA != 0;
// Stale running max (docs/numerics.md "Stale running max"): a row keeps its max m unless a block raises it
// by more than kStaleTau (log2 units), so alpha stays exactly 1 and the O rescale of the warp is skipped.
// Exact in real arithmetic (l and O share m); in floating point only the binade of each P moves. BF16: any
// tau (8: P <= 256); FP8 P <= 448 needs tau < ZYFA_FP8_MAX_STALE_TAU. 0: the contract's exact running max.
constexpr float kStaleTau = ZYFA_WS_STALE_TAU;
// e4m3 V pre-transposed in global memory by the entry <kernel>_vprep (vprep.cuh; zyfa_abi.h version 3): the
// producer then loads Vt tiles exactly like K tiles (no staging buffer, no in-kernel transpose).
constexpr bool kVPre = kFp8 && ZYFA_WS_VPRE != 0;
// Packed batches (zyfa_abi.h, ABI 4; varlen.cuh): the kernel takes zyfa_varlen_args as a second parameter and
// computes (query tile, head) items of the batch's sequences, persistent (with kPersistent) or one per CTA;
// "paged" (2) gathers K / V rows through the page table.
constexpr bool kVarlen = ZYFA_WS_VARLEN != 0;
constexpr bool kPaged = ZYFA_WS_VARLEN == 2;
// V by TMA too: BF16 dense builds, and e4m3 builds with the pre-pass (Vt tiles, whose map the launcher
// encodes over the workspace; a packed Vt row holds zeros between sequences, so a tile read past a sequence's
// last key meets zeros). A packed BF16 build's V keeps cp.async, whose zero fill past a sequence's last key
// keeps a masked key's P = 0 from meeting the next sequence's V row (0 x inf would poison the output); its
// Q / K tiles may read the next sequence's rows, which the softmax masks by selection (K) or the epilogue
// never stores (Q). e4m3 V without the pre-pass is transposed in the kernel, which no TMA box gives.
[[maybe_unused]] constexpr bool kTmaV = kTma && (kVPre || (!kFp8 && !kVarlen));
// With V by TMA one producer thread issues every load and the other producer threads exit; a persistent
// packed build keeps the first warp, which maps the items (ItemSlots), and its lane 0 issues the loads.
[[maybe_unused]] constexpr bool kTmaOneThread = kTmaV && !(kVarlen && kPersistent);
// BF16 varlen with TMA: V by TMA on the blocks wholly inside a sequence, by cp.async (zero-filled) on its last
// partial block; the V full barrier keeps its 128 arrivals (the TMA thread's carries the bytes).
// (TMA on varlen builds excludes paged ones: the static_assert below.)
[[maybe_unused]] constexpr bool kTmaVWhole = kTma && kVarlen && !kFp8;
[[maybe_unused]] constexpr uint32_t kTmaProducerThreads = kTmaOneThread ? 1 : 32;
// The packed items' order (varlen_tiles.h): sequence-major, or tile-major (every sequence's last tile first).
constexpr bool kSeqMajor = ZYFA_WS_SEQ_MAJOR != 0;
// Persistent packed builds whose CTAs claim items from the launch's counter (zyfa_varlen_args.item_counter,
// ABI 5) one item ahead, in rank order, instead of taking every gridDim.x-th (varlen.cuh, ItemSlots::claim).
constexpr bool kDynamic = ZYFA_WS_DYNAMIC != 0;
// e4m3 V (without the pre-pass) goes global -> two staging buffers (cp.async, one block ahead) -> Vt.
constexpr bool kVStaged = kFp8 && !kVPre;
// FP8 with P.V in f16 (p_mode "f16"): P rounded to f16, V converted e4m3 -> f16 by the producer, P.V an
// f16 wgmma with P straight from the S accumulators, l the fp32 sum of the f16 P (HMMA with ones).
constexpr bool kPvF16 = kFp8 && ZYFA_WS_PV_F16 != 0;
constexpr bool kPv16 = !kFp8 || kPvF16;                 // P.V on 16-bit operands (bf16 or f16)
constexpr int kDQk = ZYFA_D_QK;
constexpr int kDV = ZYFA_D_V;
constexpr int kTileM = ZYFA_TILE_M;
constexpr int kTileN = ZYFA_TILE_N;
constexpr int kThreads = ZYFA_THREADS;

// ---- per-variant choices (what each variant measured fastest; kernels/sm90/NOTES.md, "What was tried", has the alternatives)
// Softmax of the thread's two rows as one interleaved chain (softmax_rows_x2) on every e4m3 variant and
// BF16 d128; BF16 192/128 keeps the per-row form (softmax_rows<true>).
constexpr bool kSoftmaxX2 = kFp8 || kDQk == 128;
// Row max by 3-input integer max on the float bits (row_max3) for BF16 and lean P; exact P takes FMNMX.
constexpr bool kMax3 = !kFp8 || kLeanP;
// Independent FMNMX chains per row in the float row max: 4 for BF16, else 1 (per row) / 2 (two rows).
constexpr bool kMaxTree = !kFp8;
// BF16: the O rescale by alpha_j is applied between the S_{j+1} issue and the P_j V_j issue (while S_{j+1}
// occupies the tensor core) instead of right after the P.V wait; same arithmetic, bitwise the same output.
constexpr bool kRescaleEarly = !kFp8;
// BF16: the loop's whole blocks (before the first masked one) in a loop of their own whose body is
// straight-line code (no mask, no qk_scale sign test, no integer-max fallback once every running max is >= 0),
// so ptxas schedules the softmax phases as one basic block (FA3's unmasked loop). Lean P measured mixed.
constexpr bool kSplitLoop = !kFp8;
// Longest-first order across (head, batch) pairs (LPT for the causal tail) needs at most kLptPairs pairs; on
// the tile grid also K and V that fit in L2 together (kLptL2Bytes, half of an H100's / H200's 50 MB L2),
// otherwise launch order (L2 reuse of one head's K and V at a time): with LPT the CTAs in flight read every
// pair's K / V at once, and 16 heads at 32K keys (192/128, batch 1) read 6.4 GB from DRAM where FA3 reads
// 0.5 GB. Persistent CTAs keep LPT there (fa_fwd_wgmma.cu says why).
constexpr uint32_t kLptPairs = 16;
constexpr int64_t kLptL2Bytes = int64_t{24} << 20;

// ---- lean P codes
constexpr float kLeanCodeBase = 12582912.0f;  // 1.5 * 2^23: the float kLeanCodeBase + c holds lean code c in its low byte
constexpr float kLeanF16Scale = 0x1p-24f;  // lean fast path: x = (S A + B) 2^-24, the f16 subnormal whose bits are the code

// ---- tile geometry
constexpr int kESize = kFp8 ? 1 : 2;              // bytes per q/k/v element
constexpr int kQkRowBytes = kDQk * kESize;        // one q/k row in global memory
constexpr int kVRowBytes = kDV * kESize;
constexpr int kQkChunks = kQkRowBytes / 16;       // 16-byte chunks per q/k row
constexpr int kVChunks = kVRowBytes / 16;
constexpr int kQkRegions = (kQkRowBytes + 127) / 128;  // 128-byte column regions per q/k row
[[maybe_unused]] constexpr int kBoxElems = 128 / kESize;           // elements of one TMA box row (128 bytes, the swizzle span)
constexpr int kQkSteps = kQkRowBytes / 32;        // wgmma k-steps of S (32 bytes: k16 bf16 / k32 e4m3)
constexpr int kPvSteps = kTileN / (kPv16 ? 16 : 32);  // wgmma k-steps of O (keys)
// K and V ring depth: e4m3 3 (2 above 160 keys per tile: 3 stages of 192 keys do not fit in 227 KiB), bf16 2;
// f16 P.V at d_qk 192: 2 (its V stages are 16-bit, and 3 do not fit).
constexpr int kStages = (kFp8 && kTileN <= 160 && !(kPvF16 && kDQk > 128)) ? 3 : 2;
constexpr int kOTiles = kDV / 8;
constexpr int kOAcc = 4 * kOTiles;                // O accumulator floats per thread
// FP8 row sums (contract: l = fp32 sum of the e4m3-rounded P fed to P.V).
// Exact P (and f16 P.V): each thread decodes its packed e4m3 P bytes to f16 pairs (exact: e4m3 values are f16
// values) and sums them with mma.sync m16n8k16 f16 x ones -> fp32 right after the P.V wait (row_sums_e4m3):
// the fp32 sum of exactly the P fed to P.V. Lean P (kLSumOnes): every P.V k-step is followed by an m64n8k32
// wgmma of P by 8 rows of e4m3 ones (wgmma_rs_n8_e4m3) into a fresh per-block accumulator: the sums on the
// tensor pipe, inside the P.V group that already reads P, through the FP8 wgmma's ~14-bit truncating adder
// (2-6e-4 low on average, the layout probe's worst row 1.6e-3), as O itself. (A 17th n8 tile of one m64n136k32
// P.V instead makes ptxas serialise every wgmma, C7511: its per-block zeroing defines wgmma inputs.)
constexpr bool kLSumOnes = kLeanP;
// Lean d128 gives every Vt region 8 ones rows after its kDV rows; lean 192/128 has no smem for that
// (3 stages of 230528 B) and reads one shared 1 KiB region of ones after the V stages (kOnesRegion).
constexpr bool kOnesRegion = kLSumOnes && kDQk != 128;
constexpr int kVtRows = kDV + (kLSumOnes && !kOnesRegion ? 8 : 0);  // e4m3 Vt rows per region
constexpr int kOnesBytes = kOnesRegion ? 8 * 128 : 0;  // kOnesRegion: 8 rows of 128 e4m3 ones after the V stages
constexpr int kSAcc = kTileN / 2;                 // S accumulator floats per thread (m64 x kTileN)
constexpr int kSTiles = kTileN / 8;               // 8-column tiles of S per thread row
constexpr int kPRegs = kPv16 ? kTileN / 4 : kTileN / 8;  // packed P of one 64 x kTileN block per thread
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kPShift = kFp8 ? 8.0f : 0.0f;     // FP8: row max lands at 2^8 (contract SHIFT)

// ---- shared-memory layout (all tiles 1024-byte aligned for the 128B swizzle)
constexpr int kQBytes = kQkRegions * kTileM * 128;
constexpr int kKStageBytes = kQkRegions * kTileN * 128;
// bf16 (and f16 for kPvF16): 2 regions x kTileN keys x 128 B; e4m3: kVtRegions regions of kVtRows d rows x 128 key
// bytes (key positions 128 r .. 128 r + 127 in region r; a last region of a kTileN that is not a multiple of 128
// is only partly used).
constexpr int kVtRegions = (kTileN + 127) / 128;
constexpr int kVStageBytes = kPv16 ? kDV * kTileN * 2 : kVtRows * 128 * kVtRegions;
// The bytes a V stage's TMA writes (kTmaV): e4m3 the kDV Vt rows of each region, not lean d128's ones rows.
[[maybe_unused]] constexpr int kVTmaBytes = kFp8 ? kDV * 128 * kVtRegions : kVStageBytes;
// Q full, Q empty (persistent) and 4 mbarriers per stage, 8 B each; persistent packed builds add the item
// slots after them (varlen.cuh, ItemSlots: 4 mbarriers, 2 slots of kItemSlotStride bytes, 24 B of walk
// position), and Q tile 1's full and empty mbarriers with kQBuffers 2. Packed builds keep the same layout on
// either grid, so a row's smem_bytes fits both.
constexpr int kItemSlotStride = kDynamic ? 16 : kSeqMajor ? 12 : 8;  // batch, q_tile (, head, item)
constexpr int kItemSlotBytes = kVarlen && kPersistent ? 4 * 8 + 2 * kItemSlotStride + 24 : 0;
constexpr int kBarrierBytes = kVarlen ? 256 : 128;
constexpr int kAlignSlack = 1024;
// kVStaged: two row-major staging buffers of V rows (kTileN keys x 128 B) that cp.async fills one block
// ahead of the transpose.
constexpr int kStagingBytes = kVStaged ? 2 * kTileN * kVRowBytes : 0;
constexpr int kSmemOneQ = kQBytes + kStages * (kKStageBytes + kVStageBytes) + kOnesBytes + kStagingBytes +
                           kBarrierBytes + kAlignSlack;
// Two Q tiles (q_tiles 2, varlen builds): on the persistent grid the producer loads item k + 1's Q (and after
// it that item's first K / V blocks) while item k's S blocks still read its own, instead of after the last of
// them. Tile i % 2 holds the CTA's i-th Q; each has its full and empty mbarrier. The tile grid uses tile 0
// (a row's layout fits either grid).
constexpr int kQBuffers = ZYFA_WS_Q_TILES;
constexpr int kSmemNoOStage = kSmemOneQ + (kQBuffers - 1) * kQBytes;
// The epilogue's O staging (epilogue.cuh): its width per pass comes from the shared memory the build gives
// beyond the rest of the layout (variants.bzl smem_bytes): 8 warps x 16 rows x kDV bf16 = 32 KiB for whole
// rows, half of it for two passes of kDV / 2 columns, none for the register path.
constexpr int kOStageCols = ZYFA_SMEM_BYTES - kSmemNoOStage == 8 * 16 * kDV * 2   ? kDV
                            : ZYFA_SMEM_BYTES - kSmemNoOStage == 8 * 16 * kDV      ? kDV / 2
                                                                                   : 0;
constexpr int kOStageBytes = 8 * 16 * kOStageCols * 2;  // 8 consumer warps x 16 bf16 rows x kOStageCols
constexpr int kSmemBytes = kSmemNoOStage + kOStageBytes;
// The shared-memory base is the dynamic array's address, used as it is for lean P (a kernel without static
// shared memory gets its dynamic shared memory 1024-aligned; the kernel traps if not) and rounded up to 1024
// at run time for the others; the layout keeps the slack either way.
constexpr bool kRawSmemBase = kLeanP;

// ---- registers: setmaxnreg budgets, 128 x producer + 256 x consumer <= 168 x 384 (the launch allocation).
// e4m3 with TMA beside the V staging 80 / 208 (thread 0's TMA state spills at 72); staged e4m3 V 72 / 216;
// otherwise (e4m3 all-TMA included) 56 / 224.
constexpr bool kFp8Tma = kFp8 && kTma && kVStaged;
constexpr int kProducerRegs = kFp8Tma ? 80 : kVStaged ? 72 : 56;
constexpr int kConsumerRegs = kFp8Tma ? 208 : kVStaged ? 216 : 224;

constexpr WgmmaType kQkType = kFp8 ? WgmmaType::kE4m3 : WgmmaType::kBf16;
constexpr WgmmaType kPvType = kPvF16 ? WgmmaType::kF16 : (kFp8 ? WgmmaType::kE4m3 : WgmmaType::kBf16);

static_assert(ZYFA_DTYPE_E4M3 == 0 || ZYFA_DTYPE_E4M3 == 1, "ZYFA_DTYPE_E4M3 must be 0 or 1");
static_assert(ZYFA_LEAN_P == 0 || ZYFA_LEAN_P == 1, "ZYFA_LEAN_P must be 0 or 1");
static_assert(!kLeanP || kFp8, "lean P is an FP8-only mode");
static_assert(!kFp8 || kStaleTau < static_cast<float>(ZYFA_FP8_MAX_STALE_TAU),
              "FP8's P must stay below e4m3's 448: ZYFA_WS_STALE_TAU < ZYFA_FP8_MAX_STALE_TAU (zyfa_abi.h)");
static_assert(!kPvF16 || !kLeanP, "P.V in f16: exact P");
static_assert(!kVPre || (!kPvF16 && kTileN % 64 == 0), "ZYFA_WS_VPRE: exact or lean e4m3, tile_n a multiple of 64");
static_assert(!kLSumOnes || !kVPre || kTileN <= 128, "lean P's ones rows with the pre-pass: one Vt region");
static_assert(ZYFA_WS_VARLEN >= 0 && ZYFA_WS_VARLEN <= 2, "ZYFA_WS_VARLEN: 0 dense, 1 varlen, 2 paged");
static_assert(!kSeqMajor || kVarlen, "ZYFA_WS_SEQ_MAJOR orders a packed batch's items");
static_assert(!kDynamic || (kVarlen && kPersistent), "ZYFA_WS_DYNAMIC claims a persistent packed build's items");
static_assert(kQBuffers == 1 || (kQBuffers == 2 && kVarlen && !kPaged), "ZYFA_WS_Q_TILES: 1, or 2 on a varlen build");
static_assert(!kVarlen || !kTma || (!kPaged && (!kFp8 || kVPre)),
              "ZYFA_WS_VARLEN: TMA (maps as parameter 3) on bf16 varlen and e4m3 varlen with the V pre-pass only");
static_assert(!kVarlen || !kVPre || (!kPaged && kTileN <= 128),
              "ZYFA_WS_VARLEN: the packed V pre-pass on varlen builds of tile_n <= 128 (ZYFA_VT_PACKED_GAP)");
static_assert(kThreads == 384 && kTileM == 128, "one producer + two consumer warpgroups of 64 rows");
// S is one m64nN wgmma accumulator; a P.V k-step is 16 bf16 / 32 e4m3 keys.
static_assert(kTileN == 128 || kTileN == 192, "ZYFA_TILE_N: 128 or 192");
static_assert(kDV == 128, "O is one m64n128 wgmma accumulator");
static_assert(kQkRowBytes % 32 == 0 && kDQk <= 256, "d_qk * element size must be a multiple of 32 bytes");
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 168 * 384, "setmaxnreg budget exceeds the launch allocation");
static_assert(kSmemBytes == ZYFA_SMEM_BYTES,
              "ZYFA_SMEM_BYTES (variants.bzl smem_bytes) must equal this kernel's shared-memory layout");
static_assert(kSmemBytes <= 227 * 1024, "shared memory layout exceeds the sm_90 per-block limit");
static_assert((2 + 4 * kStages) * 8 + kItemSlotBytes + (kQBuffers - 1) * 16 <= kBarrierBytes,
              "mbarriers do not fit their area");
static_assert(kVStageBytes % 1024 == 0 && kKStageBytes % 1024 == 0, "stages must keep 1024-byte alignment");

}  // namespace zyfa_sm90_ws
