"""THE list of ZYFA code objects.

Read by Bazel (kernels/defs.bzl turns each entry into a target) and by the pip build of zyfa-core
(kernels/tools/zyfa_kernel_build.py parses it with ast.literal_eval). Keep it a pure literal: no
function calls, no arithmetic on names, so both front ends read exactly the same list.

Fields:
  name        kernel key = file stem = extern "C" symbol = manifest key
  arch        "sm90a" | "gfx950"
  dtype       "bf16" | "e4m3fn"  (inputs; output is always bf16)
  d_qk, d_v   head dims of q.k and of v
  causal      True (non-causal kernels come later)
  p_mode      FP8 only: "exact" (exp2) or "lean" (one FMA to the e4m3 code); None for bf16
  kind        "cuda" (nvcc -> cubin), "hip" (clang -x hip -> .s -> hsaco), "asmgen" (zyfa_asmgen -> .s -> hsaco)
  src         source file under kernels/ (cuda, hip) or generator name (asmgen)
  tile_m      query rows per block (per work item of a persistent kernel)
  tile_n      keys per inner block (the P-scaling block of the FP8 numerics)
  threads     threads per block
  smem_bytes  dynamic shared memory per block (cuda); the kernel static_asserts it matches its layout.
              For hip/asmgen the LDS size is read from the built code object, so it is 0 here.
  tag         "" for the default kernel of its (arch, dtype, d_qk, d_v, causal, p_mode) key; another
              implementation of the same key carries a tag (e.g. "simple"), which the name spells
              before the arch and zyfa_core.select(tag=...) picks.
  grid        optional, written to the manifest row ("tiles" when absent):
              "tiles"       launch grid = (ceil(seqlen_q / tile_m), heads_q, batch), one block per tile;
              "persistent"  launch grid = (min(SMs of the device, n_items), 1, 1), n_items = ceil(seqlen_q /
                            tile_m) * heads_q * batch (layout "varlen" / "paged": the compact query-tile bound
                            ZYFA_VARLEN_TILES * heads_q); block x takes items x, x + G, ... Only for src
                            sm90/fa_fwd_wgmma.cu, which the build then compiles with -DZYFA_WS_PERSISTENT=1.
              A packed (layout "varlen" / "paged") row's "tiles" grid is (ZYFA_VARLEN_TILES, heads_q, 1);
              "batch_tiles" (packed layouts only) = (ceil(max_seqlen_q / tile_m), heads_q, batch), one
              block per query tile of each sequence (src gfx950/fa_fwd_bf16.hip); "dynamic" (packed
              layouts, src sm90/fa_fwd_wgmma.cu, -DZYFA_WS_DYNAMIC=1) = the persistent grid whose block x
              takes item x, then the next unclaimed one from zyfa_varlen_args.item_counter (ABI 5), which
              launchers keep in the last 16 bytes of the launch's workspace and clear before the kernel.
  loads       optional, written to the manifest row ("cp.async" when absent): "tma" = Q / K / V tiles by
              TMA from one producer thread (src sm90/fa_fwd_wgmma.cu, bf16 only; built with
              -DZYFA_WS_TMA=1): the kernel takes zyfa_tma_maps (kernels/abi/zyfa_abi.h) as a second
              parameter, which launchers encode from the args.
  stale_tau   optional float, written to the manifest row (0.0 when absent): the running-max staleness
              bound of the online softmax in log2 units (docs/numerics.md "Stale running max"). A row
              keeps its max m unless a block raises it by more than stale_tau, so the O rescale is
              skipped; zyfa.reference(stale_tau=...) reproduces it. Only src sm90/fa_fwd_wgmma.cu
              (-DZYFA_WS_STALE_TAU), gfx950/fa_fwd_bf16.hip (-DZYFA_STALE_TAU) and the mfma_fp8 generator
              (which reads the field); FP8 needs < 0.8 (P <= 2^(8 + tau) < 448).
  v_prep      optional bool (False when absent): the kernel reads V pre-transposed, written by a second entry
              of its cubin, <name>_vprep, which launchers run first into a workspace (kernels/abi/zyfa_abi.h,
              ABI 3; the manifest row's "v_prep" names the entry, "" when absent). Only src
              sm90/fa_fwd_wgmma.cu, e4m3fn with p_mode exact or lean, d_v 128, tile_n a multiple of 64
              (-DZYFA_WS_VPRE=1); the V stages then need no staging buffers (2 x tile_n x 128 bytes less).
  layout      optional, written to the manifest row ("dense" when absent): "varlen" = packed q / k / v of a
              serving step (cu_seqlens), "paged" = packed q with K / V through a page table (kernels/abi/
              zyfa_abi.h, ABI 4: the kernel takes zyfa_varlen_args as a second parameter). Src
              sm90/fa_fwd_wgmma.cu with loads "cp.async" and no v_prep (-DZYFA_WS_VARLEN=1 / 2), either grid;
              src gfx950/fa_fwd_bf16.hip (-DZYFA_VARLEN=1 / 2), grid "batch_tiles" (ceil(max_seqlen_q /
              tile_m), heads_q, batch): a workgroup whose tile starts past its sequence's length exits at
              once. The name spells it (_varlen / _paged before the arch).
  tile_order  optional, written to the manifest row ("ascending" when absent): "descending" = blockIdx.x
              computes query tile ceil(seqlen_q / tile_m) - 1 - blockIdx.x, so the causal tiles with the most
              keys start first and the short ones fill the tail (grid "tiles", src gfx950/fa_fwd_bf16.hip,
              built with -DZYFA_TILE_DESCENDING=1); "global_descending" = the workgroups in dispatch order
              (x fastest) compute the last query tile of every head and batch first, then the one before it,
              and so on (src gfx950/fa_fwd_bf16.hip, -DZYFA_TILE_DESCENDING=2). The launch grid is the same.
              Packed rows of src sm90/fa_fwd_wgmma.cu: "ascending" = tile-major items (every sequence's last
              query tile first, then the one before it, ...), "sequence_major" = a sequence's items on
              consecutive items, kv head by kv head, each kv head's tiles longest first with its query heads
              adjacent, the sequences by tile count, descending (-DZYFA_WS_SEQ_MAJOR=1,
              kernels/sm90/fa_fwd_wgmma/varlen_tiles.h).
  q_tiles     optional int (1 when absent), build-only: query tiles in shared memory. 2 on a "varlen" row of
              src sm90/fa_fwd_wgmma.cu (-DZYFA_WS_Q_TILES=2): on the persistent grid the producer loads the
              next item's Q while the current item's S blocks still read its own; smem_bytes counts the
              second tile (the tile grid leaves it unused).
"""

VARIANTS = [
    # ---- NVIDIA Hopper (sm_90a): warp-specialised wgmma kernels (kernels/sm90/fa_fwd_wgmma.cu), the default.
    # smem_bytes = Q + stages x (K + V) + 128 B of mbarriers + 1 KiB of alignment slack + the epilogue's
    # O staging (the kernel static_asserts it); e4m3 V stages hold V^T, and e4m3 without v_prep adds 2 x 16 KiB of V
    # staging. O staging: 32 KiB (d128: whole rows) or 16 KiB (192/128: two passes of 64 columns), each
    # +1..7% at 2K-8K over the register-path epilogue.
    # Ratios below are TFLOP/s over the build without the option, H200, at 2K / 4K / 8K / 16K
    # (kernels/sm90/NOTES.md; its "What was tried" table has what lost).
    # stale_tau 8.0 on both BF16 wgmma kernels: d128 1.027..1.028 at 2K-8K and 1.03..1.09 at 16K, 192/128
    # 1.013..1.017 and 1.06; errors vs float64 unchanged. FP8 (tau 0.75) did not gain and is not set.
    {"name": "fa_fwd_bf16_hd128_causal_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 197760, "tag": "",
     "grid": "persistent", "loads": "tma", "stale_tau": 8.0},
    # tile_n 192 (2 K/V stages): +5% at 16K, +3% at 8K, -4% at 2K against tile_n 128.
    # grid "persistent" for the FP8 kernels: 2K +9..12%, 16K 1.00..1.02. BF16 loads "tma" +4..6%; BF16 d128
    # with TMA also persistent (+6..13% over TMA with one CTA per tile); BF16 192/128 keeps one CTA per
    # tile (persistent TMA unmeasured there; persistent without TMA 0.94..0.98 at 16K).
    {"name": "fa_fwd_e4m3fn_hd128_causal_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": "exact", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 192, "threads": 384, "smem_bytes": 214144, "tag": "", "grid": "persistent"},
    # v_prep on lean d128, the pass inside every timed launch: 1.027 / 1.052 / 1.029 / 1.054 (exact d128 and
    # 192/128 lost: not set there). Its row sums run on the tensor pipe (the kernel's lean-P row sums,
    # kLSumOnes: 8 rows of ones per V stage, 3 KiB): 1.036 / 1.050 / 1.053 / 1.045; the codes as f16
    # subnormals a further +5%.
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 151680, "tag": "", "grid": "persistent",
     "v_prep": True},
    # p_mode "f16": FP8 inputs with P.V in f16 (P rounded to f16, V converted e4m3 -> f16 in the kernel):
    # out vs float64 of the dequantised inputs 1.6e-3 against FP8 exact's ~2e-2, at 0.86..1.00
    # of exact's speed. V stages are 16-bit (tile_n 128 x 256 B), so tile_n 128 with 3 stages at d128.
    {"name": "fa_fwd_e4m3fn_hd128_causal_pf16_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": "f16", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 230528, "tag": "", "grid": "persistent"},
    {"name": "fa_fwd_bf16_hd192x128_causal_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 230528, "tag": "", "loads": "tma",
     "stale_tau": 8.0},
    # Q / K by TMA: +1..3% at 2K-8K; 16K within the card's pass-to-pass noise (0.98..1.07).
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": "exact", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 230528, "tag": "", "grid": "persistent",
     "loads": "tma"},
    # Lean 192/128: the tensor-pipe row sums through one shared 1 KiB ones region (the kernel's kLSumOnes and
    # kOnesRegion for it) with the subnormal codes: 1.090 / 1.069 / 1.052 / 1.043.
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 231552, "tag": "", "grid": "persistent"},
    # 192/128 f16 P.V: 2 stages (3 do not fit), the two-pass epilogue; 0.85..0.90 of exact's speed.
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_pf16_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": "f16", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 214144, "tag": "", "grid": "persistent",
     "loads": "tma"},
    # ---- NVIDIA Hopper (sm_90a): packed batches of a serving step (layout "varlen": cu_seqlens; "paged": K / V
    # through a page table), the default kernels' numerics with cp.async loads (the TMA maps describe dense
    # tensors). Packed rows run on the persistent grid (min(SMs, items) CTAs walk the batch's (query tile, head)
    # items, longest first, as the dense persistent kernels do; the producer's first warp maps each item and
    # hands it to the other warps): against FA3 varlen 0.86-0.96x on the serving step, where the tile grid gave
    # 0.68-0.77x. Paged rows keep grid "tiles" (one CTA per item, the same output bits): FP8 paged on the
    # persistent grid measured 0.93x / 0.97x of it (d128, 192/128), and the BF16 paged builds spill there
    # (kernels/sm90/NOTES.md, "Packed batches"). FP8 in the default lean P mode. smem_bytes as the dense rows
    # plus 128 B of barriers and item slots. ABI 6: the BF16 varlen rows load Q / K by TMA over the packed tensors
    # (518.1 / 532.5 against 514.3 / 514.7 TFLOP/s on cp.async, d128 / 192/128), the FP8 varlen rows read V from
    # the packed V pre-pass (734.6 / 695.2 against 664.8 / 659.0 with the in-kernel transpose; no V staging, so
    # 32 KiB less shared memory); the paged rows keep cp.async and the transpose.
    {"name": "fa_fwd_bf16_hd128_causal_varlen_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 230656, "tag": "", "stale_tau": 8.0,
     "grid": "persistent", "layout": "varlen", "loads": "tma", "q_tiles": 2},
    {"name": "fa_fwd_bf16_hd128_causal_paged_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 197888, "tag": "", "stale_tau": 8.0,
     "grid": "tiles", "layout": "paged"},
    # 192/128 (16 K / V heads of 320 elements: the step's K / V is 2.5x d128's): grid "dynamic" with
    # tile_order "sequence_major" (a sequence's items kv head by kv head keep one kv head's K / V in L2;
    # claimed items keep the CTAs balanced): 518.0 and 684.0 TFLOP/s (BF16, FP8) against 477.1 and 666.0 for
    # the persistent grid's builds, and the kv-head order 573.5 / 732.6 against 558.8 / 722.8 with a
    # sequence's tiles first; on the d128 rows the kv-head order with claims measured 539.6 / 749.8 against
    # 547.5 / 773.6 for the persistent grid and tile-major order, which they keep (kernels/sm90/NOTES.md,
    # "Packed batches").
    {"name": "fa_fwd_bf16_hd192x128_causal_varlen_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 192,
     "d_v": 128, "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 230656, "tag": "", "stale_tau": 8.0,
     "grid": "dynamic", "layout": "varlen", "tile_order": "sequence_major", "loads": "tma"},
    {"name": "fa_fwd_bf16_hd192x128_causal_paged_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 192,
     "d_v": 128, "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 230656, "tag": "", "stale_tau": 8.0,
     "grid": "tiles", "layout": "paged"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_varlen_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128,
     "d_v": 128, "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 168192, "tag": "",
     "grid": "persistent", "layout": "varlen", "v_prep": True,
     "loads": "tma", "q_tiles": 2},
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_paged_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128,
     "d_v": 128, "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 184576, "tag": "",
     "grid": "tiles", "layout": "paged"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_varlen_sm90a", "arch": "sm90a", "dtype": "e4m3fn",
     "d_qk": 192, "d_v": 128, "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 231680, "tag": "",
     "grid": "dynamic", "layout": "varlen", "tile_order": "sequence_major", "v_prep": True,
     "loads": "tma", "q_tiles": 2},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_paged_sm90a", "arch": "sm90a", "dtype": "e4m3fn",
     "d_qk": 192, "d_v": 128, "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_wgmma.cu",
     "tile_m": 128, "tile_n": 128, "threads": 384, "smem_bytes": 231680, "tag": "",
     "grid": "tiles", "layout": "paged"},
    # ---- NVIDIA Hopper (sm_90a): simple mma.sync kernels, tag "simple": the first correct kernels, kept as a
    # cross-check and a fallback (select with tag="simple").
    {"name": "fa_fwd_bf16_hd128_causal_simple_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_simple.cu",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 52224, "tag": "simple"},
    {"name": "fa_fwd_bf16_hd192x128_causal_simple_sm90a", "arch": "sm90a", "dtype": "bf16", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "cuda", "src": "sm90/fa_fwd_simple.cu",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 68608, "tag": "simple"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_simple_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": "exact", "kind": "cuda", "src": "sm90/fa_fwd_simple.cu",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 26624, "tag": "simple"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_simple_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_simple.cu",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 26624, "tag": "simple"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_simple_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": "exact", "kind": "cuda", "src": "sm90/fa_fwd_simple.cu",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 34816, "tag": "simple"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_simple_sm90a", "arch": "sm90a", "dtype": "e4m3fn", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": "lean", "kind": "cuda", "src": "sm90/fa_fwd_simple.cu",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 34816, "tag": "simple"},
    # ---- AMD MI355X (gfx950)
    # BF16: eight waves (two ping-pong groups of four), 32 query rows each, K and V through LDS in three
    # stages (docs/gfx950-bf16-kernel.md); the LDS size is read from the code object. Modelled (MODELLED,
    # the calibrated model): stale_tau 8.0 (the O rescale skipped) 4594 -> 4331 cycles per key block at
    # d128; tile_order "global_descending" over "descending" at 16K (512-key fit) 1151 -> 1231 (d128) and 1188 -> 1352
    # (192x128) TFLOP/s (the tried table of docs/gfx950-bf16-kernel.md).
    {"name": "fa_fwd_bf16_hd128_causal_gfx950", "arch": "gfx950", "dtype": "bf16", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "hip", "src": "gfx950/fa_fwd_bf16.hip",
     "tile_m": 256, "tile_n": 64, "threads": 512, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 8.0},
    {"name": "fa_fwd_bf16_hd192x128_causal_gfx950", "arch": "gfx950", "dtype": "bf16", "d_qk": 192, "d_v": 128,
     "causal": True, "p_mode": None, "kind": "hip", "src": "gfx950/fa_fwd_bf16.hip",
     "tile_m": 256, "tile_n": 64, "threads": 512, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 8.0},
    # Packed batches (layout "varlen"; "paged": K / V rows through the page table): the kernels above, each
    # workgroup on its sequence's dense view (docs/gfx950-bf16-kernel.md, "Packed batches"); the dense
    # builds' assembly is unchanged by them.
    {"name": "fa_fwd_bf16_hd128_causal_varlen_gfx950", "arch": "gfx950", "dtype": "bf16", "d_qk": 128,
     "d_v": 128, "causal": True, "p_mode": None, "kind": "hip", "src": "gfx950/fa_fwd_bf16.hip",
     "tile_m": 256, "tile_n": 64, "threads": 512, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 8.0, "layout": "varlen", "grid": "batch_tiles"},
    {"name": "fa_fwd_bf16_hd192x128_causal_varlen_gfx950", "arch": "gfx950", "dtype": "bf16", "d_qk": 192,
     "d_v": 128, "causal": True, "p_mode": None, "kind": "hip", "src": "gfx950/fa_fwd_bf16.hip",
     "tile_m": 256, "tile_n": 64, "threads": 512, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 8.0, "layout": "varlen", "grid": "batch_tiles"},
    {"name": "fa_fwd_bf16_hd128_causal_paged_gfx950", "arch": "gfx950", "dtype": "bf16", "d_qk": 128,
     "d_v": 128, "causal": True, "p_mode": None, "kind": "hip", "src": "gfx950/fa_fwd_bf16.hip",
     "tile_m": 256, "tile_n": 64, "threads": 512, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 8.0, "layout": "paged", "grid": "batch_tiles"},
    {"name": "fa_fwd_bf16_hd192x128_causal_paged_gfx950", "arch": "gfx950", "dtype": "bf16", "d_qk": 192,
     "d_v": 128, "causal": True, "p_mode": None, "kind": "hip", "src": "gfx950/fa_fwd_bf16.hip",
     "tile_m": 256, "tile_n": 64, "threads": 512, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 8.0, "layout": "paged", "grid": "batch_tiles"},
    # FP8 on the matrix cores (generator mfma_fp8: v_mfma_f32_32x32x64_f8f6f4, K/V double buffered in LDS,
    # docs/gfx950-fp8-kernel.md); lean P is the default mode, exact P the accuracy-first one. Two waves of 32
    # rows share each K/V block (threads 128; one wave and the 8-wave ping-pong model slower: the ablation
    # table of docs/gfx950-fp8-kernel.md). The generator runs the last query tile first, in either descending
    # order; tile_order "global_descending" over "descending" at 16K (MODELLED, 512-key fit): lean 2377 -> 2508 (d128) and
    # 2417 -> 2724 (192x128), exact 1411 -> 1515 and 1533 -> 1761 TFLOP/s. stale_tau 0.75 (a row keeps its max
    # unless a block raises it by more than 0.75, so fewer blocks rescale O) at 16K, fitted on 2048 / 16384 keys
    # (MODELLED): lean d128 2575 -> 2617 / 2724 -> 2826, 192x128 2760 -> 2843 / 2913 -> 2995; exact d128
    # 1515 -> 1536 / 1567 -> 1604, 192x128 1755 -> 1790 / 1815 -> 1849; on the 512-key fit -0.2 to -1.3 % (the
    # tried table of docs/gfx950-fp8-kernel.md).
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_gfx950", "arch": "gfx950", "dtype": "e4m3fn", "d_qk": 128,
     "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75},
    {"name": "fa_fwd_e4m3fn_hd128_causal_gfx950", "arch": "gfx950", "dtype": "e4m3fn", "d_qk": 128, "d_v": 128,
     "causal": True, "p_mode": "exact", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_gfx950", "arch": "gfx950", "dtype": "e4m3fn", "d_qk": 192,
     "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_gfx950", "arch": "gfx950", "dtype": "e4m3fn", "d_qk": 192,
     "d_v": 128, "causal": True, "p_mode": "exact", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75},
    # Packed batches (layout "varlen"; "paged": K / V blocks gathered through the page table): the FP8 kernels
    # above, each workgroup on its sequence's dense view (docs/gfx950-fp8-kernel.md, "Packed batches"); the
    # dense builds' assembly is unchanged by them.
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_varlen_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 128, "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "varlen", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_varlen_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 128, "d_v": 128, "causal": True, "p_mode": "exact", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "varlen", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_varlen_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 192, "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "varlen", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_varlen_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 192, "d_v": 128, "causal": True, "p_mode": "exact", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "varlen", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_leanp_paged_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 128, "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "paged", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd128_causal_paged_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 128, "d_v": 128, "causal": True, "p_mode": "exact", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "paged", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_leanp_paged_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 192, "d_v": 128, "causal": True, "p_mode": "lean", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "paged", "grid": "batch_tiles"},
    {"name": "fa_fwd_e4m3fn_hd192x128_causal_paged_gfx950", "arch": "gfx950", "dtype": "e4m3fn",
     "d_qk": 192, "d_v": 128, "causal": True, "p_mode": "exact", "kind": "asmgen", "src": "mfma_fp8",
     "tile_m": 64, "tile_n": 64, "threads": 128, "smem_bytes": 0, "tag": "", "tile_order": "global_descending",
     "stale_tau": 0.75, "layout": "paged", "grid": "batch_tiles"},
]
