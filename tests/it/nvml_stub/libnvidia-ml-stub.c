/*
 * A stand-in for the NVIDIA driver's libnvidia-ml.so.1, for the test that
 * the agent build loads the driver's library at run time (tests/it/agent_nvml.rs).
 * It exports the NVML entry points the agent calls (signatures as in NVIDIA's
 * nvml.h) and describes one GPU with 2 uncorrected ECC errors and rows
 * pending remapping, so the agent's answer proves the library was loaded and read.
 * Compiled by the test with `cc -shared -fPIC`; not part of any build.
 *
 * Two variables make it a failing GPU for the agent's failure paths:
 * - REBOUND_NVML_STUB_EVENTS=lost: GPU 0 accepts XID event registration, and
 *   every event wait fails at once with NVML_ERROR_GPU_IS_LOST, as on a GPU
 *   that fell off the bus (without it, events are not supported and the
 *   agent sleeps between polls instead of waiting);
 * - REBOUND_NVML_STUB_WAIT_LOG=<file>: each event wait appends one byte to
 *   the file, so a test counts the waits from outside the agent's process.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;           /* NVML_SUCCESS = 0 */
typedef struct stubDevice *nvmlDevice_t;
typedef struct stubEventSet *nvmlEventSet_t;

#define NVML_SUCCESS 0
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15

static struct stubDevice { int index; } gpu0 = {0};
static struct stubEventSet { int unused; } events;

static nvmlReturn_t copy_string(const char *s, char *out, unsigned int len) {
    if (out == 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, s);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }
const char *nvmlErrorString(nvmlReturn_t r) { (void)r; return "stub error"; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    return copy_string("999.99.99-stub", v, len);
}
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    return copy_string("99.999.99-stub", v, len);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (count == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    if (index != 0 || dev == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &gpu0;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    if (dev == 0 || index == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)dev->index;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len) {
    (void)dev;
    return copy_string("Rebound Stub GPU", name, len);
}
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len) {
    (void)dev;
    return copy_string("GPU-00000000-stub-0000-0000-000000000000", uuid, len);
}
/* errorType 1 = NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counterType 0 = volatile. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int errorType, int counterType,
                                         unsigned long long *count) {
    (void)dev; (void)counterType;
    if (count == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *count = errorType == 1 ? 2 : 0;
    return NVML_SUCCESS;
}
/* 0 = NVML_FEATURE_DISABLED: no pages pending retirement. */
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending) {
    (void)dev;
    if (pending == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *pending = 0;
    return NVML_SUCCESS;
}

/* Rows pending remapping, no failure (Ampere+ row remapper). */
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                       unsigned int *pending, unsigned int *failed) {
    (void)dev;
    if (corr == 0 || unc == 0 || pending == 0 || failed == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *corr = 0;
    *unc = 1;
    *pending = 1;
    *failed = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (set == 0) return NVML_ERROR_INVALID_ARGUMENT;
    *set = &events;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) { (void)set; return NVML_SUCCESS; }
static int events_lost(void) {
    const char *mode = getenv("REBOUND_NVML_STUB_EVENTS");
    return mode != 0 && strcmp(mode, "lost") == 0;
}

static void log_wait(void) {
    const char *path = getenv("REBOUND_NVML_STUB_WAIT_LOG");
    if (path == 0) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;
    ssize_t n = write(fd, "w", 1);
    (void)n;
    close(fd);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types,
                                      nvmlEventSet_t set) {
    (void)dev; (void)types; (void)set;
    return events_lost() ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, void *data, unsigned int timeout_ms) {
    (void)set; (void)data;
    log_wait();
    if (events_lost()) return NVML_ERROR_GPU_IS_LOST;
    usleep(timeout_ms * 1000u);
    return NVML_ERROR_TIMEOUT;
}
