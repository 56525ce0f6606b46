// The launch plan (see plan.h). The checks run before any driver call, with zyfa_core.check_args's
// messages; every path that launches (zyfa_core.launch, zyfa-torch's C++ op) runs them.

#include "plan.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "checks.h"

namespace zyfa_core {

namespace {

constexpr std::int64_t VECTOR_BYTES = 16;  // 16-byte vector loads: pointers and strides must allow them
constexpr std::int64_t GRID_YZ_MAX = 65535;  // CUDA's gridDim.y/z limit (HIP's is larger)
constexpr std::int64_t MAX_WORK_ITEMS = 2147483647;  // the persistent kernel counts items in 32 bits
constexpr std::int64_t TMA_ALIGN = 16;  // cuTensorMapEncodeTiled: address and strides multiples of 16 bytes
constexpr std::int64_t TMA_STRIDE_LIMIT = std::int64_t{1} << 40;  // ... and strides below 2^40 bytes
constexpr std::uint32_t TMA_BOX_BYTES = 128;  // a box row is one 128-byte swizzle row
constexpr std::int64_t MAX_STRIDE = std::int64_t{1} << 61;  // elements; in bytes (x 2 at most) still an int64

[[noreturn]] void refuse(const std::string &message) { throw ArgumentError(message); }

std::string hex(std::uint64_t value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::string decimal(unsigned __int128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return digits;
}

std::uint64_t address(const void *p) { return reinterpret_cast<std::uintptr_t>(p); }

std::int64_t tiles(const PlanSpec &spec, const zyfa_fwd_args &a) {
  return (std::int64_t{a.seqlen_q} + spec.tile_m - 1) / spec.tile_m;
}

// A packed call's query-tile bound (zyfa_abi.h, ZYFA_VARLEN_TILES) from host values only; the kernel finds
// the tiles themselves in cu_seqlens_q. Its work items are the bound x heads_q (query tile, head) pairs.
std::int64_t packed_tiles(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args &v) {
  return ZYFA_VARLEN_TILES(v.total_q, a.batch, a.seqlen_q, spec.tile_m);
}

// (min(multiprocessors, items), 1, 1): the persistent grid of `items` work items.
std::array<unsigned, 3> persistent_grid(const PlanSpec &spec, unsigned __int128 items, long long multiprocessors) {
  if (multiprocessors <= 0) {
    refuse(spec.name + " takes a persistent grid, which needs the device's multiprocessor count (a positive int); "
           "got " + std::to_string(multiprocessors));
  }
  const auto blocks = std::min(static_cast<unsigned __int128>(multiprocessors), items);
  return {static_cast<unsigned>(blocks), 1, 1};
}

unsigned __int128 work_items(const PlanSpec &spec, const zyfa_fwd_args &a) {
  return static_cast<unsigned __int128>(tiles(spec, a)) * static_cast<std::uint64_t>(a.heads_q) *
         static_cast<std::uint64_t>(a.batch);
}

void check_pointers(const PlanSpec &spec, const zyfa_fwd_args &a) {
  const std::pair<const char *, const void *> tensors[4] = {{"q", a.q}, {"k", a.k}, {"v", a.v}, {"out", a.out}};
  for (const auto &[name, p] : tensors) {
    if (p == nullptr) refuse(spec.name + ": args." + name + " is a null pointer");
    if (address(p) % VECTOR_BYTES) {
      refuse(spec.name + ": args." + name + " = " + hex(address(p)) + " is not " + std::to_string(VECTOR_BYTES) +
             "-byte aligned");
    }
  }
  if ((a.flags & ZYFA_FLAG_LSE) && a.lse == nullptr) {
    refuse(spec.name + ": flags has FLAG_LSE but args.lse is a null pointer");
  }
  if (address(a.lse) % 4) refuse(spec.name + ": args.lse = " + hex(address(a.lse)) + " is not 4-byte aligned (float32)");
}

void check_sizes(const PlanSpec &spec, const zyfa_fwd_args &a) {
  const std::pair<const char *, std::int32_t> sizes[5] = {
      {"batch", a.batch}, {"heads_q", a.heads_q}, {"heads_kv", a.heads_kv}, {"seqlen_q", a.seqlen_q},
      {"seqlen_k", a.seqlen_k}};
  for (const auto &[name, n] : sizes) {
    if (n <= 0) {
      refuse(spec.name + ": args." + name + " = " + std::to_string(n) +
             " must be positive (handle empty tensors before launching)");
    }
  }
  if (a.heads_q % a.heads_kv) {
    refuse(spec.name + ": heads_q = " + std::to_string(a.heads_q) + " is not a multiple of heads_kv = " +
           std::to_string(a.heads_kv) + " (GQA/MQA)");
  }
  if (a.d_qk != spec.d_qk || a.d_v != spec.d_v) {
    refuse(spec.name + " is built for d_qk=" + std::to_string(spec.d_qk) + ", d_v=" + std::to_string(spec.d_v) +
           "; args have d_qk=" + std::to_string(a.d_qk) + ", d_v=" + std::to_string(a.d_v));
  }
  if (!walks_items(spec.grid) && (a.heads_q > GRID_YZ_MAX || a.batch > GRID_YZ_MAX)) {
    refuse(spec.name + ": heads_q = " + std::to_string(a.heads_q) + " and batch = " + std::to_string(a.batch) +
           " must each be <= " + std::to_string(GRID_YZ_MAX) + " (grid y/z limit)");
  }
  if (!spec.v_prep.empty() && (a.heads_kv > GRID_YZ_MAX || a.batch > GRID_YZ_MAX)) {
    refuse(spec.name + ": heads_kv = " + std::to_string(a.heads_kv) + " and batch = " + std::to_string(a.batch) +
           " must each be <= " + std::to_string(GRID_YZ_MAX) + " (the V pre-pass's grid y/z limit)");
  }
  if (spec.grid == Grid::persistent && spec.layout == Layout::dense &&
      work_items(spec, a) > static_cast<unsigned __int128>(MAX_WORK_ITEMS)) {
    refuse(spec.name + ": " + decimal(work_items(spec, a)) + " work items (query tiles x heads_q x batch) exceed " +
           std::to_string(MAX_WORK_ITEMS) + ", which the persistent kernel counts in 32 bits");
  }
}

void check_strides(const PlanSpec &spec, const zyfa_fwd_args &a) {
  struct Operand {
    const char *name;
    std::int64_t elem;
    std::int64_t sizes[3];    // batch, seq, head
    std::int64_t strides[3];  // the same order
  };
  const std::int64_t in = spec.fp8 ? 1 : 2;
  const Operand operands[4] = {
      {"q", in, {a.batch, a.seqlen_q, a.heads_q}, {a.q_stride_batch, a.q_stride_seq, a.q_stride_head}},
      {"k", in, {a.batch, a.seqlen_k, a.heads_kv}, {a.k_stride_batch, a.k_stride_seq, a.k_stride_head}},
      {"v", in, {a.batch, a.seqlen_k, a.heads_kv}, {a.v_stride_batch, a.v_stride_seq, a.v_stride_head}},
      {"out", 2, {a.batch, a.seqlen_q, a.heads_q}, {a.out_stride_batch, a.out_stride_seq, a.out_stride_head}},
  };
  const char *dims[3] = {"batch", "seq", "head"};
  for (const Operand &t : operands) {
    for (int d = 0; d < 3; ++d) {
      if (t.sizes[d] == 1) continue;  // never stepped along, so any stride is harmless (torch leaves them arbitrary)
      const std::string name = std::string(t.name) + "_stride_" + dims[d];
      const std::int64_t stride = t.strides[d];
      if (stride < 0) refuse(spec.name + ": args." + name + " = " + std::to_string(stride) + " is negative");
      if (stride > MAX_STRIDE) {  // so that stride * elem below cannot overflow
        refuse(spec.name + ": args." + name + " = " + std::to_string(stride) + " elements is too large (at most " +
               std::to_string(MAX_STRIDE) + ")");
      }
      const bool kv_seq = d == 1 && (t.name[0] == 'k' || t.name[0] == 'v');
      if (kv_seq && spec.max_kv_seq_stride > 0 && stride >= spec.max_kv_seq_stride) {
        refuse(spec.name + ": args." + name + " = " + std::to_string(stride) + " elements is too large for this " +
               "kernel, whose loads address a block of k / v rows with 32-bit offsets: it must be below " +
               std::to_string(spec.max_kv_seq_stride) + "; make the tensor contiguous");
      }
      if ((stride * t.elem) % VECTOR_BYTES) {
        refuse(spec.name + ": args." + name + " = " + std::to_string(stride) + " elements (" +
               std::to_string(stride * t.elem) + " bytes) is not a multiple of " + std::to_string(VECTOR_BYTES) +
               " bytes; make the tensor contiguous");
      }
    }
  }
}

void check_scalar_fields(const PlanSpec &spec, const zyfa_fwd_args &a) {
  const std::uint32_t known =
      ZYFA_FLAG_CAUSAL | ZYFA_FLAG_LSE | ZYFA_FLAG_VARLEN | ZYFA_FLAG_PAGED | ZYFA_FLAG_DESCALE_TABLE;
  const std::uint32_t unknown = a.flags & ~known;
  if (unknown) refuse(spec.name + ": args.flags has unknown bits " + hex(unknown));
  // A causal kernel serves non-causal calls too (the mask is the run-time flag); a non-causal one cannot mask.
  if ((a.flags & ZYFA_FLAG_CAUSAL) != 0 && !spec.causal) {
    refuse(spec.name + ": causal=False kernel: FLAG_CAUSAL must be clear in args.flags");
  }
  check_scalars(spec.name, spec.fp8, a.softmax_scale, {a.q_descale, a.k_descale, a.v_descale});
  if (a.reserved != 0) refuse(spec.name + ": args.reserved must be 0, got " + std::to_string(a.reserved));
}

const char *layout_name(Layout layout) {
  return layout == Layout::dense ? "dense" : layout == Layout::varlen ? "varlen" : "paged";
}

// The layout a call's flags ask for, against the kernel's.
void check_layout_flags(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen) {
  const bool packed = (a.flags & ZYFA_FLAG_VARLEN) != 0, paged = (a.flags & ZYFA_FLAG_PAGED) != 0;
  if ((paged || (a.flags & ZYFA_FLAG_DESCALE_TABLE)) && !packed) {
    refuse(spec.name + ": FLAG_PAGED and FLAG_DESCALE_TABLE need FLAG_VARLEN (a packed batch)");
  }
  const Layout asked = !packed ? Layout::dense : paged ? Layout::paged : Layout::varlen;
  if (asked != spec.layout) {
    refuse(spec.name + " serves " + layout_name(spec.layout) + " batches; args.flags ask for a " + layout_name(asked) +
           " one (select a kernel with that layout)");
  }
  if (packed != (varlen != nullptr)) {
    refuse(spec.name + (packed ? ": FLAG_VARLEN needs the packed batch's zyfa_varlen_args"
                               : ": a dense call takes no zyfa_varlen_args"));
  }
}

void check_index_pointer(const PlanSpec &spec, const char *name, const void *p, bool required) {
  if (required && p == nullptr) refuse(spec.name + ": varlen." + name + " is a null pointer");
  if (address(p) % 4) refuse(spec.name + ": varlen." + name + " = " + hex(address(p)) + " is not 4-byte aligned");
}

void check_varlen_fields(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args &v) {
  const bool paged = (a.flags & ZYFA_FLAG_PAGED) != 0, table = (a.flags & ZYFA_FLAG_DESCALE_TABLE) != 0;
  check_index_pointer(spec, "cu_seqlens_q", v.cu_seqlens_q, true);
  check_index_pointer(spec, "cu_seqlens_k", v.cu_seqlens_k, !(paged && v.seqused_k != nullptr));
  check_index_pointer(spec, "seqused_k", v.seqused_k, false);
  check_index_pointer(spec, "page_table", v.page_table, paged);
  check_index_pointer(spec, "descales", v.descales, table);
  if (!paged && v.page_table != nullptr) refuse(spec.name + ": varlen.page_table is set without FLAG_PAGED");
  if (!table && v.descales != nullptr) refuse(spec.name + ": varlen.descales is set without FLAG_DESCALE_TABLE");
  if (table && !spec.fp8) refuse(spec.name + ": FLAG_DESCALE_TABLE applies to FP8 kernels only");
  if (v.total_q <= 0 || v.total_k <= 0) {
    refuse(spec.name + ": varlen.total_q = " + std::to_string(v.total_q) + " and varlen.total_k = " +
           std::to_string(v.total_k) + " must be positive (handle empty tensors before launching)");
  }
  if (paged) {
    if (v.page_size <= 0 || v.num_pages <= 0 || v.max_pages <= 0 || v.page_table_stride < v.max_pages) {
      refuse(spec.name + ": a paged call needs page_size, num_pages, max_pages > 0 and page_table_stride >= "
             "max_pages; got " + std::to_string(v.page_size) + ", " + std::to_string(v.num_pages) + ", " +
             std::to_string(v.max_pages) + ", " + std::to_string(v.page_table_stride));
    }
    if (std::int64_t{v.num_pages} * v.page_size != v.total_k) {
      refuse(spec.name + ": varlen.total_k = " + std::to_string(v.total_k) + " must be num_pages x page_size = " +
             std::to_string(std::int64_t{v.num_pages} * v.page_size));
    }
  } else if (v.page_size != 0 || v.num_pages != 0 || v.max_pages != 0) {
    refuse(spec.name + ": varlen.page_size, num_pages and max_pages must be 0 without FLAG_PAGED");
  }
  if (v.reserved != 0) refuse(spec.name + ": varlen.reserved must be 0, got " + std::to_string(v.reserved));
  if (v.item_counter != nullptr) {
    refuse(spec.name + ": varlen.item_counter must be NULL, got " + hex(address(v.item_counter)) +
           " (the launcher points a dynamic-grid kernel's at its workspace)");
  }
  const std::int64_t items = packed_tiles(spec, a, v) * a.heads_q;
  if (items > MAX_WORK_ITEMS) {
    refuse(spec.name + ": " + std::to_string(items) + " work items (query tiles bound x heads_q) exceed " +
           std::to_string(MAX_WORK_ITEMS) + ", which a packed kernel numbers in 32 bits");
  }
}

}  // namespace

void check_spec(const PlanSpec &spec) {
  if (spec.tile_m <= 0 || spec.tile_n <= 0 || spec.threads <= 0 || spec.d_qk <= 0 || spec.d_v <= 0) {
    refuse(spec.name + ": tile_m, tile_n, threads, d_qk and d_v must be positive");
  }
  if (spec.max_kv_seq_stride < 0) {
    refuse(spec.name + ": max_kv_seq_stride must be >= 0, got " + std::to_string(spec.max_kv_seq_stride));
  }
  if (!spec.v_prep.empty() && spec.tile_n % 64 != 0) {
    refuse(spec.name + ": a kernel with a V pre-pass needs tile_n a multiple of 64, got " +
           std::to_string(spec.tile_n));
  }
  if (spec.layout == Layout::dense && spec.grid == Grid::batch_tiles) {
    refuse(spec.name + ": grid batch_tiles is for packed (varlen / paged) kernels; a dense kernel takes grid tiles, "
           "the same grid");
  }
  if (spec.layout == Layout::dense && spec.grid == Grid::dynamic) {
    refuse(spec.name + ": grid dynamic is for packed (varlen / paged) kernels (it claims their items from "
           "zyfa_varlen_args.item_counter); a dense kernel takes grid tiles or persistent");
  }
  if (spec.layout == Layout::paged && spec.tma) {
    refuse(spec.name + ": a paged kernel gathers K / V rows through the page table with cp.async; loads 'tma' "
           "is for dense and varlen kernels");
  }
  if (spec.layout == Layout::varlen && spec.tma && spec.fp8 && spec.v_prep.empty()) {
    refuse(spec.name + ": an e4m3 varlen kernel loads V by TMA only as the V pre-pass's Vt tiles; loads 'tma' "
           "needs a v_prep entry (or take loads 'cp.async')");
  }
  if (spec.layout == Layout::paged && !spec.v_prep.empty()) {
    refuse(spec.name + ": a paged kernel has no V pre-pass (v_prep is for dense and varlen kernels)");
  }
  if (spec.layout == Layout::varlen && !spec.v_prep.empty() && spec.tile_n > 128) {
    refuse(spec.name + ": the packed V pre-pass's layout serves KV blocks of up to 128 keys; tile_n is " +
           std::to_string(spec.tile_n));
  }
}

void check_args(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen) {
  check_pointers(spec, a);
  check_sizes(spec, a);
  check_strides(spec, a);
  check_scalar_fields(spec, a);
  check_layout_flags(spec, a, varlen);
  if (varlen != nullptr) check_varlen_fields(spec, a, *varlen);
}

std::array<unsigned, 3> launch_grid(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen,
                                    long long multiprocessors) {
  if (spec.layout != Layout::dense && spec.grid != Grid::batch_tiles) {
    if (varlen == nullptr) {
      refuse(spec.name + ": the grid of a " + layout_name(spec.layout) + " kernel needs the packed batch's "
             "zyfa_varlen_args (its total_q)");
    }
    const std::int64_t bound = packed_tiles(spec, a, *varlen);
    if (spec.grid == Grid::tiles) return {static_cast<unsigned>(bound), static_cast<unsigned>(a.heads_q), 1};
    // persistent or dynamic
    const auto items = static_cast<unsigned __int128>(bound) * static_cast<std::uint64_t>(a.heads_q);
    return persistent_grid(spec, items, multiprocessors);
  }
  if (spec.grid != Grid::persistent) {  // tiles, or a packed kernel's batch_tiles: the same grid
    return {static_cast<unsigned>(tiles(spec, a)), static_cast<unsigned>(a.heads_q), static_cast<unsigned>(a.batch)};
  }
  return persistent_grid(spec, work_items(spec, a), multiprocessors);
}

namespace {

// The V pre-pass's Vt: `planes` (a dense call's batch; 1 for a packed batch, whose sequences share each row)
// of heads_kv x d_v rows of `row` bytes (zyfa_abi.h).
struct VtShape {
  std::int64_t row;
  std::uint64_t planes;
};

VtShape vt_shape(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen) {
  if (spec.layout == Layout::dense) {
    return {ZYFA_VT_ROW_BYTES(a.seqlen_k, spec.tile_n), static_cast<std::uint64_t>(a.batch)};
  }
  if (varlen == nullptr) {
    refuse(spec.name + ": the V pre-pass of a packed kernel needs the batch's zyfa_varlen_args (its total_k)");
  }
  return {ZYFA_VT_PACKED_ROW_BYTES(a.batch, varlen->total_k), 1};
}

}  // namespace

std::uint64_t workspace_bytes(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen) {
  std::uint64_t bytes = 0;
  if (!spec.v_prep.empty()) {
    const VtShape vt = vt_shape(spec, a, varlen);
    bytes = vt.planes * static_cast<std::uint64_t>(a.heads_kv) * static_cast<std::uint64_t>(a.d_v) *
            static_cast<std::uint64_t>(vt.row);
  }
  return spec.grid == Grid::dynamic ? bytes + ZYFA_ITEM_COUNTER_BYTES : bytes;
}

std::uint64_t check_workspace(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen,
                              std::uint64_t workspace) {
  const std::uint64_t bytes = workspace_bytes(spec, a, varlen);
  if (bytes == 0) return 0;
  if (workspace == 0) {
    refuse(spec.name + (spec.v_prep.empty() ? " claims its items from a counter in the workspace"
                                            : " reads V pre-transposed") +
           ": pass workspace=<device pointer to " + std::to_string(bytes) +
           " bytes> (spec.workspace_bytes(batch, heads_kv, seqlen_k, total_k)); got 0");
  }
  if (workspace % VECTOR_BYTES) {
    refuse(spec.name + ": workspace = " + hex(workspace) + " is not " + std::to_string(VECTOR_BYTES) +
           "-byte aligned");
  }
  return bytes;
}

namespace {

// The v map of a kernel with a V pre-pass: its Vt in the workspace (a.v by then), planes x heads_kv x d_v rows
// of vt.row bytes, a box of 128 key bytes by d_v rows. False (cp.async) where a column is no int32 coordinate.
bool vt_geometry(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen, MapGeometry &g) {
  const VtShape vt = vt_shape(spec, a, varlen);
  const std::uint64_t rows = static_cast<std::uint64_t>(a.d_v) * static_cast<std::uint64_t>(a.heads_kv);
  const std::uint64_t row = static_cast<std::uint64_t>(vt.row);
  if (vt.row > INT32_MAX || address(a.v) % TMA_ALIGN || row % TMA_ALIGN ||
      row * rows >= static_cast<std::uint64_t>(TMA_STRIDE_LIMIT)) {
    return false;
  }
  const std::uint64_t dims[4] = {row, static_cast<std::uint64_t>(a.d_v), static_cast<std::uint64_t>(a.heads_kv),
                                  vt.planes};
  const std::uint64_t strides[3] = {row, row * static_cast<std::uint64_t>(a.d_v), row * rows};
  const std::uint32_t box[4] = {TMA_BOX_BYTES, static_cast<std::uint32_t>(a.d_v), 1, 1};
  g.address = a.v;
  std::copy(dims, dims + 4, g.dims);
  std::copy(strides, strides + 3, g.strides);
  std::copy(box, box + 4, g.box);
  return true;
}

}  // namespace

bool tma_geometry(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen,
                  std::array<MapGeometry, 3> &out) {
  const std::int64_t elem = spec.fp8 ? 1 : 2;
  struct Operand {
    const void *p;
    std::int64_t stride_seq, stride_head, stride_batch;
    std::int32_t d, seqlen, heads, rows;
  };
  // A packed batch is one sequence of all its rows (batch 1): the kernel adds a sequence's first row to its
  // row coordinates, and a sequence's tile may read the next sequence's rows, which it masks or never stores.
  const std::int32_t rows_q = varlen ? varlen->total_q : a.seqlen_q, rows_k = varlen ? varlen->total_k : a.seqlen_k;
  const std::int64_t batch = varlen ? 1 : a.batch;
  const Operand operands[3] = {
      {a.q, a.q_stride_seq, a.q_stride_head, a.q_stride_batch, a.d_qk, rows_q, a.heads_q, spec.tile_m},
      {a.k, a.k_stride_seq, a.k_stride_head, a.k_stride_batch, a.d_qk, rows_k, a.heads_kv, spec.tile_n},
      {a.v, a.v_stride_seq, a.v_stride_head, a.v_stride_batch, a.d_v, rows_k, a.heads_kv, spec.tile_n},
  };
  // With a V pre-pass, v is its Vt (vt_geometry), whatever v's own strides were.
  const bool vt = !spec.v_prep.empty();
  for (int i = 0; i < (vt ? 2 : 3); ++i) {
    const Operand &t = operands[i];
    // A packed batch's one "batch" is never stepped over: its stride is the tensor's rows (-1, refused below,
    // where that product would pass the maps' stride limit).
    const std::int64_t packed_stride =
        t.stride_seq < TMA_STRIDE_LIMIT / std::max<std::int64_t>(t.seqlen, 1) ? t.stride_seq * t.seqlen : -1;
    const std::int64_t strides[3] = {t.stride_seq, t.stride_head, varlen ? packed_stride : t.stride_batch};
    if (address(t.p) % TMA_ALIGN) return false;
    MapGeometry &g = out[i];
    for (int s = 0; s < 3; ++s) {
      if (strides[s] < 0 || strides[s] >= TMA_STRIDE_LIMIT / elem || (strides[s] * elem) % TMA_ALIGN) return false;
      g.strides[s] = static_cast<std::uint64_t>(strides[s] * elem);
    }
    g.address = t.p;
    const std::int64_t dims[4] = {t.d, t.seqlen, t.heads, batch};
    for (int d = 0; d < 4; ++d) g.dims[d] = static_cast<std::uint64_t>(dims[d]);
    g.box[0] = TMA_BOX_BYTES / static_cast<std::uint32_t>(elem);
    g.box[1] = static_cast<std::uint32_t>(t.rows);
    g.box[2] = g.box[3] = 1;
  }
  return !vt || vt_geometry(spec, a, varlen, out[2]);
}

void fill_tma_maps(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen, zyfa_tma_maps &maps,
                   const MapEncoder &encode) {
  std::memset(&maps, 0, sizeof(maps));
  std::array<MapGeometry, 3> geometry;
  if (!tma_geometry(spec, a, varlen, geometry)) return;
  zyfa_tensor_map *out[3] = {&maps.q, &maps.k, &maps.v};
  for (int i = 0; i < 3; ++i) encode(out[i], spec.fp8 ? TENSOR_MAP_U8 : TENSOR_MAP_BF16, geometry[i]);
  maps.valid = 1;
}

LoadedPlan load_plan(const PlanSpec &spec, int device, const std::string &path) {
  check_spec(spec);
  LoadedPlan plan;
  plan.spec = spec;
  // zyfa_fwd_args, then zyfa_varlen_args (packed batches), then zyfa_tma_maps ("tma" kernels).
  const size_t params = 1 + (spec.layout != Layout::dense ? 1 : 0) + (spec.tma ? 1 : 0);
  plan.kernel = load_kernel(device, path, spec.name, static_cast<int>(spec.smem), params);
  if (!spec.v_prep.empty()) plan.prep = load_kernel(device, path, spec.v_prep, 0, spec.layout == Layout::dense ? 2 : 3);
  if (walks_items(spec.grid)) {
    plan.multiprocessors = device_properties(device).multiprocessors;
    persistent_grid(spec, 1, plan.multiprocessors);  // refuses a device that reports no count
  }
  return plan;
}

void launch(const LoadedPlan &plan, const zyfa_fwd_args &args, const zyfa_varlen_args *varlen, void *stream,
            std::uint64_t workspace) {
  const PlanSpec &spec = plan.spec;
  alignas(16) zyfa_fwd_args a = args;  // a private, aligned copy: the pre-pass changes v
  check_args(spec, a, varlen);
  const std::uint64_t workspace_size = check_workspace(spec, a, varlen, workspace);
  const auto grid = launch_grid(spec, a, varlen, plan.multiprocessors);
  const unsigned block[3] = {static_cast<unsigned>(spec.threads), 1, 1};
  if (!spec.v_prep.empty()) {  // grid (row / keys, kv heads, planes)
    const VtShape vt_rows = vt_shape(spec, a, varlen);
    const unsigned prep_grid[3] = {static_cast<unsigned>(vt_rows.row / ZYFA_VPREP_KEYS),
                                   static_cast<unsigned>(a.heads_kv), static_cast<unsigned>(vt_rows.planes)};
    const unsigned prep_block[3] = {ZYFA_VPREP_THREADS, 1, 1};
    const void *vt = reinterpret_cast<const void *>(static_cast<std::uintptr_t>(workspace));
    KernelParams prep = {{&a, sizeof(a), alignof(zyfa_fwd_args)}};
    if (varlen != nullptr) prep.add({varlen, sizeof(*varlen), alignof(zyfa_varlen_args)});
    prep.add({&vt, sizeof(vt), alignof(const void *)});
    launch_params(plan.prep, prep_grid, prep_block, 0, stream, prep);
    a.v = vt;
  }
  zyfa_varlen_args v{};
  if (varlen != nullptr) {  // check_args: a varlen / paged kernel
    v = *varlen;
    if (spec.grid == Grid::dynamic) {  // its item counter: the workspace's last bytes, zero at launch
      const std::uint64_t counter = workspace + workspace_size - ZYFA_ITEM_COUNTER_BYTES;
      clear_u32(plan.kernel, counter, 1, stream);
      v.item_counter = reinterpret_cast<std::uint32_t *>(static_cast<std::uintptr_t>(counter));
    }
  }
  alignas(64) zyfa_tma_maps maps;
  if (spec.tma) {
    fill_tma_maps(spec, a, varlen, maps, [&](void *map_out, int data_type, const MapGeometry &g) {
      encode_map(map_out, data_type, g.address, g.dims, g.strides, g.box, spec.name);
    });
  }
  KernelParams params = {{&a, sizeof(a), alignof(zyfa_fwd_args)}};
  if (varlen != nullptr) params.add({&v, sizeof(v), alignof(zyfa_varlen_args)});
  if (spec.tma) params.add({&maps, sizeof(maps), alignof(zyfa_tma_maps)});
  launch_params(plan.kernel, grid.data(), block, spec.smem, stream, params);
}

}  // namespace zyfa_core
