// Each kernel runs one MFMA and stores its result right away, so the pinned clang must pad the
// MFMA -> store dependency with exactly the wait states its hazard recognizer requires.
typedef __bf16 bf16x8 __attribute__((ext_vector_type(8)));
typedef __bf16 bf16x4 __attribute__((ext_vector_type(4)));
typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef int i32x8 __attribute__((ext_vector_type(8)));
#define K extern "C" __attribute__((global))

K void m32x32x16_bf16(const bf16x8 *a, const bf16x8 *b, f32x16 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  c[t] = __builtin_amdgcn_mfma_f32_32x32x16_bf16(a[t], b[t], (f32x16){}, 0, 0, 0);
}
K void m16x16x32_bf16(const bf16x8 *a, const bf16x8 *b, f32x4 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  c[t] = __builtin_amdgcn_mfma_f32_16x16x32_bf16(a[t], b[t], (f32x4){}, 0, 0, 0);
}
K void m32x32x64_f8f6f4(const i32x8 *a, const i32x8 *b, f32x16 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  c[t] = __builtin_amdgcn_mfma_scale_f32_32x32x64_f8f6f4(a[t], b[t], (f32x16){}, 0, 0, 0, 0, 0, 0);
}
K void m16x16x128_f8f6f4(const i32x8 *a, const i32x8 *b, f32x4 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  c[t] = __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a[t], b[t], (f32x4){}, 0, 0, 0, 0, 0, 0);
}
K void m32x32x8_bf16(const bf16x4 *a, const bf16x4 *b, f32x16 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  typedef short s4 __attribute__((ext_vector_type(4)));
  c[t] = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(__builtin_bit_cast(s4, a[t]), __builtin_bit_cast(s4, b[t]),
                                                  (f32x16){}, 0, 0, 0);
}
K void m16x16x16_bf16(const bf16x4 *a, const bf16x4 *b, f32x4 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  typedef short s4 __attribute__((ext_vector_type(4)));
  c[t] = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(s4, a[t]), __builtin_bit_cast(s4, b[t]),
                                                   (f32x4){}, 0, 0, 0);
}
K void m32x32x16_fp8(const long *a, const long *b, f32x16 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  c[t] = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a[t], b[t], (f32x16){}, 0, 0, 0);
}
K void m16x16x32_fp8(const long *a, const long *b, f32x4 *c) {
  int t = __builtin_amdgcn_workitem_id_x();
  c[t] = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a[t], b[t], (f32x4){}, 0, 0, 0);
}
