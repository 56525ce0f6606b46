// The launch plan: everything between a filled argument struct and the driver calls, for zyfa_core.launch
// (through module.cpp) and for zyfa-torch's C++ op (through zyfa_plan_launch in zyfa_core_api.h) alike:
// the argument checks, the grid, the V pre-pass's workspace size and launch, the TMA maps, the launch.
// No torch and no pybind11 here.

#ifndef ZYFA_CORE_PLAN_H
#define ZYFA_CORE_PLAN_H

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "driver.h"
#include "zyfa_abi.h"

namespace zyfa_core {

// A manifest row's "layout": what batches the kernel serves (zyfa_abi.h, ABI 4).
enum class Layout { dense, varlen, paged };

// A manifest row's "grid" (zyfa_abi.h, launch_grid below): tiles = one block per query tile (for a packed
// kernel, per tile of the bound on all sequences' tiles); persistent = min(multiprocessors, items) blocks
// walking the items; batch_tiles (packed kernels only) = one block per query tile of each sequence; dynamic
// (packed kernels only) = the persistent grid, its blocks claiming items from a counter in the workspace
// (zyfa_varlen_args.item_counter, ABI 5).
enum class Grid { tiles, persistent, batch_tiles, dynamic };

// The grids of min(multiprocessors, items) blocks that walk their items.
inline bool walks_items(Grid grid) { return grid == Grid::persistent || grid == Grid::dynamic; }

// What a manifest row (zyfa_core.KernelSpec) says the launch needs.
struct PlanSpec {
  std::string name;
  std::string v_prep;  // the V pre-pass entry of the code object, "" for none
  bool fp8 = false;    // dtype e4m3fn (else bf16)
  bool causal = true;
  Grid grid = Grid::tiles;  // the manifest row's "grid"
  bool tma = false;         // loads "tma" (else "cp.async")
  Layout layout = Layout::dense;  // varlen / paged kernels take zyfa_varlen_args as their second parameter
  int d_qk = 0, d_v = 0, tile_m = 0, tile_n = 0, threads = 0;
  unsigned smem = 0;  // dynamic shared memory at launch (KernelSpec.launch_smem_bytes)
  std::int64_t max_kv_seq_stride = 0;  // k / v seq strides (elements) must stay below it; 0: no own limit
};

// Throws ArgumentError unless `spec` is a launchable description (positive tiles, threads, dims).
void check_spec(const PlanSpec &spec);

// Throws ArgumentError (zyfa_core.check_args's messages) unless `a` (and `varlen`, the packed batch's
// second parameter, nullptr for a dense call) can be launched with `spec`.
void check_args(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen = nullptr);

// The grid: (ceil(seqlen_q / tile_m), heads_q, batch), or for a persistent kernel (min(multiprocessors,
// items), 1, 1), items = query tiles x heads_q x batch. A packed (varlen / paged) kernel has the query-tile
// bound ZYFA_VARLEN_TILES(varlen->total_q, batch, seqlen_q, tile_m) for its tiles: grid (bound, heads_q, 1),
// or persistent / dynamic (min(multiprocessors, bound x heads_q), 1, 1); with grid batch_tiles it takes the dense
// (ceil(seqlen_q / tile_m), heads_q, batch), seqlen_q being max_seqlen_q. Throws ArgumentError for a
// persistent kernel and multiprocessors <= 0, and for a packed kernel without `varlen`.
std::array<unsigned, 3> launch_grid(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen,
                                    long long multiprocessors);

// The workspace bytes of one launch: the V pre-pass's (batch x heads_kv x d_v rows of ZYFA_VT_ROW_BYTES; a
// packed batch, `varlen` required: heads_kv x d_v rows of ZYFA_VT_PACKED_ROW_BYTES), then, grid dynamic,
// ZYFA_ITEM_COUNTER_BYTES for the item counter; 0 for a kernel that needs neither.
std::uint64_t workspace_bytes(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen);

// Throws ArgumentError unless `workspace` is a 16-byte aligned device pointer (any value when
// workspace_bytes is 0); returns workspace_bytes.
std::uint64_t check_workspace(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen,
                              std::uint64_t workspace);

// One TMA map's geometry: zyfa_abi.h's comment above zyfa_tma_maps.
struct MapGeometry {
  const void *address;
  std::uint64_t dims[4];     // d, seq, head, batch
  std::uint64_t strides[3];  // seq, head, batch, in bytes
  std::uint32_t box[4];
};
using MapEncoder = std::function<void(void *map_out, int data_type, const MapGeometry &g)>;

// Whether q, k and v can be described by tensor maps (pointers and strides in bytes multiples of 16,
// strides below 2^40 bytes); the three geometries go to `out`. A packed batch (`varlen` not null) is described
// as one sequence of its total_q / total_k rows. A kernel with a V pre-pass maps v (the workspace by then) as
// its Vt: dims {row bytes, d_v, heads_kv, planes}, box {128, d_v, 1, 1} (zyfa_abi.h, ABI 7).
bool tma_geometry(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen,
                  std::array<MapGeometry, 3> &out);

// The zyfa_tma_maps bytes: the three maps from `encode` and valid = 1, or all zero (valid = 0: the kernel
// loads with cp.async) when tma_geometry says no.
void fill_tma_maps(const PlanSpec &spec, const zyfa_fwd_args &a, const zyfa_varlen_args *varlen, zyfa_tma_maps &maps,
                   const MapEncoder &encode);

// A plan with its kernels loaded on one device.
struct LoadedPlan {
  PlanSpec spec;
  Kernel kernel;
  Kernel prep;              // the V pre-pass entry, when spec.v_prep is set
  long long multiprocessors = 0;  // the device's count (a persistent grid needs it)
};

LoadedPlan load_plan(const PlanSpec &spec, int device, const std::string &path);

// Checks `a`, `varlen` and `workspace`, then launches on `stream`: the V pre-pass first (into `workspace`, which
// the kernel then reads as v), then the kernel with its parameters: zyfa_fwd_args, then `varlen` for a varlen /
// paged kernel (grid dynamic: its item_counter pointed at the workspace's last bytes, cleared on `stream` first),
// then the TMA maps for a "tma" kernel.
void launch(const LoadedPlan &plan, const zyfa_fwd_args &args, const zyfa_varlen_args *varlen, void *stream,
            std::uint64_t workspace);

}  // namespace zyfa_core

#endif  // ZYFA_CORE_PLAN_H
