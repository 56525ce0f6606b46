/* Test double of the HIP runtime subset that zyfa_core._driver uses. It is NOT a runtime: it runs
 * nothing, it records each call as one line in the file named by $FAKE_GPU_LOG.
 *
 * A "code object" is text: "FAKEHSACO <name> <name> ...". hipGetDevicePropertiesR0600 writes the
 * marketing name at offset 0 and the gcnArchName at an offset no real layout has, because the
 * extension must not depend on one ROCm release's struct layout. Environment knobs: FAKE_DEVICE_COUNT
 * (1), FAKE_GCN_ARCH ("gfx950:sramecc+:xnack-"), FAKE_LAUNCH_ERROR.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;

enum { SUCCESS = 0, INVALID_VALUE = 1, INVALID_DEVICE = 101, INVALID_IMAGE = 200, NOT_FOUND = 500,
       LAUNCH_FAILURE = 719 };

static int g_device = 0;

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

int fake_current_device(void) { return g_device; }

hipError_t hipInit(unsigned flags) { (void)flags; return SUCCESS; }
hipError_t hipDriverGetVersion(int *v) { *v = 60443483; return SUCCESS; }
hipError_t hipGetDeviceCount(int *n) { *n = env_int("FAKE_DEVICE_COUNT", 1); return SUCCESS; }
hipError_t hipGetDevice(int *d) { *d = g_device; return SUCCESS; }

hipError_t hipSetDevice(int d) {
  if (d < 0 || d >= env_int("FAKE_DEVICE_COUNT", 1)) return INVALID_DEVICE;
  g_device = d;
  log_line("hipSetDevice device=%d", d);
  return SUCCESS;
}

hipError_t hipDeviceGetName(char *name, int len, int d) {
  snprintf(name, (size_t)len, "Fake Instinct %d", d);
  return SUCCESS;
}

hipError_t hipGetDevicePropertiesR0600(void *props, int d) {
  const char *arch = getenv("FAKE_GCN_ARCH");
  snprintf((char *)props, 256, "Fake Instinct %d", d);
  memset((char *)props + 300, 0x7, 4); /* a non-text field before the name */
  snprintf((char *)props + 1234, 256, "%s", arch ? arch : "gfx950:sramecc+:xnack-");
  return SUCCESS;
}

hipError_t hipModuleLoadData(void **module, const void *image) {
  if (strncmp((const char *)image, "FAKEHSACO ", 10) != 0) return INVALID_IMAGE;
  *module = strdup((const char *)image);
  log_line("hipModuleLoadData device=%d", g_device);
  return SUCCESS;
}

hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
  char needle[160];
  snprintf(needle, sizeof(needle), " %s", name);
  const char *hit = strstr((const char *)module, needle);
  size_t n = strlen(needle);
  if (!hit || (hit[n] != ' ' && hit[n] != '\n' && hit[n] != '\0')) return NOT_FOUND;
  *function = strdup(name);
  log_line("hipModuleGetFunction name=%s device=%d", name, g_device);
  return SUCCESS;
}

hipError_t hipModuleLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned smem, void *stream, void **params, void **extra) {
  if (params || !extra) return INVALID_VALUE;
  /* HIP_LAUNCH_PARAM_BUFFER_POINTER, ptr, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END */
  if (extra[0] != (void *)0x1 || extra[2] != (void *)0x2 || extra[4] != (void *)0x3) return INVALID_VALUE;
  int e = env_int("FAKE_LAUNCH_ERROR", 0);
  if (e) return e;
  const unsigned char *bytes = extra[1];
  size_t size = *(size_t *)extra[3];
  char hex[2 * 4096 + 1] = {0};
  for (size_t i = 0; i < size && i < 4096; ++i) sprintf(hex + 2 * i, "%02x", bytes[i]);
  log_line("hipModuleLaunchKernel name=%s device=%d grid=%u,%u,%u block=%u,%u,%u smem=%u stream=%#zx size=%zu "
           "args=%s", (const char *)function, g_device, gx, gy, gz, bx, by, bz, smem, (size_t)stream, size, hex);
  return SUCCESS;
}

const char *hipGetErrorName(hipError_t r) {
  switch (r) {
    case SUCCESS: return "hipSuccess";
    case INVALID_VALUE: return "hipErrorInvalidValue";
    case INVALID_DEVICE: return "hipErrorInvalidDevice";
    case INVALID_IMAGE: return "hipErrorInvalidImage";
    case NOT_FOUND: return "hipErrorNotFound";
    case LAUNCH_FAILURE: return "hipErrorLaunchFailure";
    default: return "hipErrorUnknown";
  }
}

const char *hipGetErrorString(hipError_t r) {
  switch (r) {
    case INVALID_IMAGE: return "device kernel image is invalid";
    case NOT_FOUND: return "named symbol not found";
    case LAUNCH_FAILURE: return "unspecified launch failure";
    default: return "fake hip error";
  }
}
