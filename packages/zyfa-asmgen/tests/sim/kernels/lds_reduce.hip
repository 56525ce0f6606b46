// Multi-wave LDS tree reduction for the simulator tests: block of 256 threads (4 waves) sums
// `n` floats per block; exercises LDS, s_barrier across waves and the LDS race checker.
#define SYNC()                                              \
  do {                                                      \
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); \
    __builtin_amdgcn_s_barrier();                           \
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup"); \
  } while (0)

extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(256, 256))) void
lds_reduce(const float *__restrict__ x, float *__restrict__ out, int n) {
  __attribute__((shared)) float buf[256];
  const int t = __builtin_amdgcn_workitem_id_x();
  const int blk = __builtin_amdgcn_workgroup_id_x();
  float acc = 0.f;
  for (int i = t; i < n; i += 256) acc += x[blk * n + i];
  buf[t] = acc;
  SYNC();
  for (int s = 128; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    SYNC();
  }
  if (t == 0) out[blk] = buf[0];
}
