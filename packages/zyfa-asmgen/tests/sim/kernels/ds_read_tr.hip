// gfx950 transposing LDS reads through the pinned clang's builtins, for the simulator tests: a
// block of 128 threads (2 waves). Every lane stores 16 bytes of `in` to LDS, then (after a
// barrier) each lane of one wave reads the row the other wave's lane t ^ 64 stored, with each of
// the four transposing reads. out gets 9 dwords per lane: tr4 (2), tr8 (2), tr16 (2), tr6 (3).
typedef int v2i __attribute__((ext_vector_type(2)));
typedef int v3i __attribute__((ext_vector_type(3)));
typedef int v4i __attribute__((ext_vector_type(4)));
typedef short v4s __attribute__((ext_vector_type(4)));
#define LDS_PTR(T, p) ((__attribute__((address_space(3))) T *)(p))

extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(128, 128))) void
ds_read_tr(const v4i *__restrict__ in, int *__restrict__ out) {
  __attribute__((shared)) static v4i lds[128];
  const int t = __builtin_amdgcn_workitem_id_x();
  lds[t] = in[t];
#ifndef NO_BARRIER
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#endif
  v4i *row = lds + (t ^ 64);
  v2i r4 = __builtin_amdgcn_ds_read_tr4_b64_v2i32(LDS_PTR(v2i, row));
  v2i r8 = __builtin_amdgcn_ds_read_tr8_b64_v2i32(LDS_PTR(v2i, row));
  v4s r16 = __builtin_amdgcn_ds_read_tr16_b64_v4i16(LDS_PTR(v4s, row));
  v3i r6 = __builtin_amdgcn_ds_read_tr6_b96_v3i32(LDS_PTR(v3i, row));
  int *o = out + 9 * t;
  o[0] = r4[0];
  o[1] = r4[1];
  o[2] = r8[0];
  o[3] = r8[1];
  o[4] = (unsigned short)r16[0] | ((unsigned)(unsigned short)r16[1] << 16);
  o[5] = (unsigned short)r16[2] | ((unsigned)(unsigned short)r16[3] << 16);
  o[6] = r6[0];
  o[7] = r6[1];
  o[8] = r6[2];
}
