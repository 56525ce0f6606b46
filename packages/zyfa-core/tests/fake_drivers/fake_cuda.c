/* Test double of the CUDA driver API subset that zyfa_core._driver uses. It is NOT a driver: it
 * runs nothing, it records each call as one line in the file named by $FAKE_GPU_LOG, so the tests can
 * check exactly what the launcher asked for (grid, block, shared memory, stream, argument bytes) on a
 * machine without a GPU.
 *
 * A "code object" is text: "FAKECUBIN <name> <name> ...". Environment knobs: FAKE_DEVICE_COUNT (1),
 * FAKE_CC_MAJOR/FAKE_CC_MINOR (9/0), FAKE_INIT_ERROR, FAKE_LAUNCH_ERROR, FAKE_PARAM_SIZE (192),
 * FAKE_PARAM_COUNT (1, or 2 for a kernel whose name contains "tma": the args and the zyfa_tma_maps,
 * "_varlen" or "_paged": the args and zyfa_varlen_args, or ends in "_vprep": the args and the V pre-pass's
 * workspace pointer), FAKE_PARAM_SIZE2 (448, the second parameter's size, at offset 192; 80 for a varlen
 * kernel, 8 for "_vprep"), FAKE_NO_PARAM_INFO (hide
 * cuFuncGetParamInfo's result), FAKE_TMA_ERROR (cuTensorMapEncodeTiled returns this error),
 * FAKE_MEMSET_ERROR (cuMemsetD32Async returns this error).
 * Built with -DFAKE_WITHOUT_TENSOR_MAP it lacks cuTensorMapEncodeTiled, as drivers before CUDA 12 do
 * (an env switch cannot hide a symbol from dlsym).
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void *CUcontext;

enum {
  SUCCESS = 0, INVALID_VALUE = 1, NO_DEVICE = 100, INVALID_DEVICE = 101, INVALID_IMAGE = 200,
  INVALID_CONTEXT = 201, NOT_FOUND = 500, LAUNCH_FAILED = 719
};

static CUcontext g_current = NULL;
static int g_inited = 0;

typedef struct {
  char name[128];
  size_t param_count;
  size_t param_size[3];
  size_t param_offset[3];
} fake_function;

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
  const char *path = getenv("FAKE_GPU_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

void *fake_current_context(void) { return g_current; }

CUresult cuInit(unsigned flags) {
  (void)flags;
  int e = env_int("FAKE_INIT_ERROR", 0);
  if (e) return e;
  g_inited = 1;
  return SUCCESS;
}

CUresult cuDriverGetVersion(int *v) { *v = 13000; return SUCCESS; }

CUresult cuDeviceGetCount(int *n) {
  if (!g_inited) return 3; /* CUDA_ERROR_NOT_INITIALIZED */
  *n = env_int("FAKE_DEVICE_COUNT", 1);
  return SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("FAKE_DEVICE_COUNT", 1)) return INVALID_DEVICE;
  *dev = ordinal;
  return SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
  snprintf(name, (size_t)len, "Fake GPU %d", dev);
  return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
  (void)dev;
  switch (attribute) {
    case 16: *value = 132; return SUCCESS;
    case 75: *value = env_int("FAKE_CC_MAJOR", 9); return SUCCESS;
    case 76: *value = env_int("FAKE_CC_MINOR", 0); return SUCCESS;
    case 97: *value = 232448; return SUCCESS;
    default: return INVALID_VALUE;
  }
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, int dev) {
  *ctx = (CUcontext)(size_t)(0x1000 + dev);
  log_line("cuDevicePrimaryCtxRetain dev=%d", dev);
  return SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) { *ctx = g_current; return SUCCESS; }

CUresult cuCtxSetCurrent(CUcontext ctx) {
  g_current = ctx;
  log_line("cuCtxSetCurrent ctx=%#zx", (size_t)ctx);
  return SUCCESS;
}

CUresult cuModuleLoadData(void **module, const void *image) {
  if (!g_current) return INVALID_CONTEXT;
  if (strncmp((const char *)image, "FAKECUBIN ", 10) != 0) return INVALID_IMAGE;
  *module = strdup((const char *)image);
  log_line("cuModuleLoadData ctx=%#zx", (size_t)g_current);
  return SUCCESS;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  if (!g_current) return INVALID_CONTEXT;
  char needle[160];
  snprintf(needle, sizeof(needle), " %s", name);
  const char *text = (const char *)module;
  const char *hit = strstr(text, needle);
  size_t n = strlen(needle);
  if (!hit || (hit[n] != ' ' && hit[n] != '\n' && hit[n] != '\0')) return NOT_FOUND;
  fake_function *f = calloc(1, sizeof(*f));
  snprintf(f->name, sizeof(f->name), "%s", name);
  const size_t len = strlen(name);
  const int vprep = len > 6 && strcmp(name + len - 6, "_vprep") == 0;
  const int varlen = strstr(name, "_varlen") != NULL || strstr(name, "_paged") != NULL;
  const int tma = strstr(name, "tma") != NULL;
  /* zyfa_fwd_args, then zyfa_varlen_args (packed), then zyfa_tma_maps ("tma") or the pre-pass's pointer. */
  f->param_count = (size_t)env_int("FAKE_PARAM_COUNT", 1 + varlen + (vprep || tma));
  if (f->param_count > 3) f->param_count = 3;
  f->param_size[0] = (size_t)env_int("FAKE_PARAM_SIZE", 192);
  f->param_size[1] = (size_t)env_int("FAKE_PARAM_SIZE2", varlen ? 80 : vprep ? 8 : 448);
  f->param_size[2] = (size_t)env_int("FAKE_PARAM_SIZE3", vprep ? 8 : 448);
  /* As nvcc lays them out: each after the one before, rounded up to its alignment (64 for the maps). */
  f->param_offset[0] = 0;
  f->param_offset[1] = varlen ? f->param_size[0] : (f->param_size[0] + 63) / 64 * 64;
  f->param_offset[2] = (f->param_offset[1] + f->param_size[1] + 63) / 64 * 64;
  *function = f;
  log_line("cuModuleGetFunction name=%s", name);
  return SUCCESS;
}

CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
  if (!g_current) return INVALID_CONTEXT;
  log_line("cuFuncSetAttribute name=%s attribute=%d value=%d", ((fake_function *)function)->name, attribute,
           value);
  return value > 232448 ? INVALID_VALUE : SUCCESS;
}

CUresult cuFuncGetParamInfo(void *function, size_t index, size_t *offset, size_t *size) {
  if (env_int("FAKE_NO_PARAM_INFO", 0)) return INVALID_VALUE;
  fake_function *f = function;
  const int past_end = index >= f->param_count;
  log_line("cuFuncGetParamInfo name=%s index=%zu result=%d", f->name, index, past_end ? INVALID_VALUE : SUCCESS);
  if (past_end) return INVALID_VALUE;
  *offset = f->param_offset[index];
  *size = f->param_size[index];
  return SUCCESS;
}

/* The index of the kernel's zyfa_tma_maps parameter (its last, for a "tma" name that is no "_vprep" entry),
 * -1 for none. */
static int tma_param(const fake_function *f) {
  const size_t len = strlen(f->name);
  const int vprep = len > 6 && strcmp(f->name + len - 6, "_vprep") == 0;
  return strstr(f->name, "tma") != NULL && !vprep && f->param_count > 1 ? (int)f->param_count - 1 : -1;
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
  if (!g_current) return INVALID_CONTEXT;
  if (!params || extra) return INVALID_VALUE;
  int e = env_int("FAKE_LAUNCH_ERROR", 0);
  if (e) return e;
  fake_function *f = function;
  /* Like the real driver, read exactly each declared parameter's size from params[i]. */
  static char hex[3][2 * 4096 + 1];
  for (size_t p = 0; p < 3; ++p) {
    hex[p][0] = 0;
    if (p >= f->param_count) continue;
    const unsigned char *bytes = params[p];
    for (size_t i = 0; i < f->param_size[p] && i < 4096; ++i) sprintf(hex[p] + 2 * i, "%02x", bytes[i]);
  }
  /* zyfa_core promises a 64-byte aligned host copy of the maps (a __grid_constant__ CUtensorMap struct), the
   * last parameter of a "tma" kernel. */
  if (tma_param(f) >= 0 && (uintptr_t)params[tma_param(f)] % 64 != 0) return INVALID_VALUE;
  log_line("cuLaunchKernel name=%s ctx=%#zx grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%#zx args=%s%s%s%s%s", f->name,
           (size_t)g_current, gx, gy, gz, bx, by, bz, smem, (size_t)stream, hex[0],
           f->param_count > 1 ? " second=" : "", hex[1], f->param_count > 2 ? " third=" : "", hex[2]);
  return SUCCESS;
}

/* Logs the call (a launcher clears a dynamic-grid kernel's item counter before the launch); FAKE_MEMSET_ERROR
 * makes it fail with that error. */
CUresult cuMemsetD32Async(unsigned long long dst, unsigned value, size_t count, void *stream) {
  if (!g_current) return INVALID_CONTEXT;
  int e = env_int("FAKE_MEMSET_ERROR", 0);
  if (e) return e;
  if (dst % 4) return INVALID_VALUE;
  log_line("cuMemsetD32Async dst=%#llx value=%u count=%zu stream=%#zx", dst, value, count, (size_t)stream);
  return SUCCESS;
}

#ifndef FAKE_WITHOUT_TENSOR_MAP
/* Validates like the real cuTensorMapEncodeTiled where a launcher mistake would show (the rules of its
 * documentation in cuda.h), logs the call, and fills the map with a pattern the tests recompute: 16
 * little-endian words, word i = address + i. */
CUresult cuTensorMapEncodeTiled(void *map, int data_type, unsigned rank, void *address, const uint64_t *dims,
                                const uint64_t *strides, const uint32_t *box, const uint32_t *element_strides,
                                int interleave, int swizzle, int l2, int oob) {
  int e = env_int("FAKE_TMA_ERROR", 0);
  if (e) return e;
  size_t elem = data_type == 0 ? 1 : data_type == 9 ? 2 : 0; /* UINT8, BFLOAT16: all ZYFA uses */
  if (!map || (uintptr_t)map % 64 || elem == 0 || rank != 4 || (uintptr_t)address % 16) return INVALID_VALUE;
  for (unsigned i = 0; i < rank; ++i) {
    if (dims[i] == 0 || dims[i] > (1ull << 32)) return INVALID_VALUE;
    if (box[i] == 0 || box[i] > 256 || element_strides[i] == 0 || element_strides[i] > 8) return INVALID_VALUE;
    if (i + 1 < rank && (strides[i] % 16 || strides[i] >= (1ull << 40))) return INVALID_VALUE;
  }
  if ((box[0] * elem) % 16 || (swizzle == 3 && box[0] * elem > 128)) return INVALID_VALUE;
  if (interleave != 0 || swizzle < 0 || swizzle > 3 || l2 < 0 || l2 > 3 || oob < 0 || oob > 1) return INVALID_VALUE;
  uint64_t *words = map;
  for (int i = 0; i < 16; ++i) words[i] = (uint64_t)(uintptr_t)address + (uint64_t)i;
  log_line("cuTensorMapEncodeTiled dtype=%d rank=%u address=%#zx dims=%llu,%llu,%llu,%llu strides=%llu,%llu,%llu "
           "box=%u,%u,%u,%u element_strides=%u,%u,%u,%u interleave=%d swizzle=%d l2=%d oob=%d",
           data_type, rank, (size_t)(uintptr_t)address, (unsigned long long)dims[0], (unsigned long long)dims[1],
           (unsigned long long)dims[2], (unsigned long long)dims[3], (unsigned long long)strides[0],
           (unsigned long long)strides[1], (unsigned long long)strides[2], box[0], box[1], box[2], box[3],
           element_strides[0], element_strides[1], element_strides[2], element_strides[3], interleave, swizzle, l2,
           oob);
  return SUCCESS;
}
#endif

static const char *names[][2] = {
    {"CUDA_SUCCESS", "no error"},
    {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
};

static int index_of(CUresult r) {
  switch (r) {
    case SUCCESS: return 0;
    case INVALID_VALUE: return 1;
    case NO_DEVICE: return 2;
    case INVALID_DEVICE: return 3;
    case INVALID_IMAGE: return 4;
    case INVALID_CONTEXT: return 5;
    case NOT_FOUND: return 6;
    case LAUNCH_FAILED: return 7;
    default: return -1;
  }
}

CUresult cuGetErrorName(CUresult r, const char **out) {
  int i = index_of(r);
  *out = i < 0 ? NULL : names[i][0];
  return i < 0 ? INVALID_VALUE : SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char **out) {
  int i = index_of(r);
  *out = i < 0 ? NULL : names[i][1];
  return i < 0 ? INVALID_VALUE : SUCCESS;
}
