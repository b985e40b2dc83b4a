/* The CUDA driver (libcuda.so.1, part of every NVIDIA driver installation, unlike the
 * runtime library) opened with dlopen, its entry points looked up by name. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cuda.h"

typedef struct {
    const char *name;
    size_t offset;
} entry_point;

#define ENTRY(field, symbol) {symbol, offsetof(mlc_cuda, field)}
static const entry_point ENTRY_POINTS[] = {
    ENTRY(init, "cuInit"),
    ENTRY(device_get, "cuDeviceGet"),
    ENTRY(primary_ctx_retain, "cuDevicePrimaryCtxRetain"),
    ENTRY(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2"),
    ENTRY(ctx_get_current, "cuCtxGetCurrent"),
    ENTRY(ctx_set_current, "cuCtxSetCurrent"),
    ENTRY(pointer_get_attribute, "cuPointerGetAttribute"),
    ENTRY(mem_host_alloc, "cuMemHostAlloc"),
    ENTRY(mem_free_host, "cuMemFreeHost"),
    ENTRY(stream_create, "cuStreamCreate"),
    ENTRY(stream_destroy, "cuStreamDestroy_v2"),
    ENTRY(stream_synchronize, "cuStreamSynchronize"),
    ENTRY(stream_wait_event, "cuStreamWaitEvent"),
    ENTRY(event_create, "cuEventCreate"),
    ENTRY(event_destroy, "cuEventDestroy_v2"),
    ENTRY(event_record, "cuEventRecord"),
    ENTRY(event_synchronize, "cuEventSynchronize"),
    ENTRY(event_elapsed_time, "cuEventElapsedTime"),
    ENTRY(memcpy_dtoh_async, "cuMemcpyDtoHAsync_v2"),
    ENTRY(memcpy_htod_async, "cuMemcpyHtoDAsync_v2"),
    ENTRY(get_error_name, "cuGetErrorName"),
};
#undef ENTRY

int mlc_cuda_open(mlc_cuda *cu, const char *library, char *err, size_t errlen) {
    memset(cu, 0, sizeof *cu);
    const char *file = library && library[0] ? library : "libcuda.so.1";
    cu->library = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (!cu->library) {
        snprintf(err, errlen, "the CUDA driver could not be loaded (%s): %s", file, dlerror());
        return MLC_ERR_STATE;
    }
    for (size_t i = 0; i < sizeof ENTRY_POINTS / sizeof ENTRY_POINTS[0]; i++) {
        void *fn = dlsym(cu->library, ENTRY_POINTS[i].name);
        if (!fn) {
            snprintf(err, errlen, "the CUDA driver %s has no %s (a driver older than CUDA 11?)", file,
                     ENTRY_POINTS[i].name);
            mlc_cuda_close(cu);
            return MLC_ERR_STATE;
        }
        memcpy((char *)cu + ENTRY_POINTS[i].offset, &fn, sizeof fn);
    }
    CUresult rc = cu->init(0);
    if (rc != MLC_CU_SUCCESS) {
        char name[64];
        snprintf(err, errlen, "cuInit failed (%s): no usable GPU or driver on this node",
                 mlc_cuda_error_name(cu, rc, name, sizeof name));
        mlc_cuda_close(cu);
        return MLC_ERR_STATE;
    }
    return MLC_OK;
}

void mlc_cuda_close(mlc_cuda *cu) {
    if (cu->library) dlclose(cu->library);
    memset(cu, 0, sizeof *cu);
}

const char *mlc_cuda_error_name(const mlc_cuda *cu, CUresult error, char *buf, size_t len) {
    const char *name = NULL;
    if (cu->get_error_name && cu->get_error_name(error, &name) == MLC_CU_SUCCESS && name)
        snprintf(buf, len, "%s", name);
    else
        snprintf(buf, len, "CUDA error %d", error);
    return buf;
}
