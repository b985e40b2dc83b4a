/* The CUDA driver, loaded at run time (driver.c): a machine without CUDA never needs it, and
 * the core is built and tested without its headers. Only what staging device buffers through
 * host memory uses (stage.c) is declared, with the values of CUDA's cuda.h. Framework-free;
 * callers hold an mlc_cuda per team, never a process-wide one. */
#ifndef MLC_CUDA_H
#define MLC_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;       /* CUDA_SUCCESS = 0 */
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

enum {
    MLC_CU_SUCCESS = 0,
    MLC_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    MLC_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    MLC_CU_MEMORYTYPE_DEVICE = 2,
    MLC_CU_MEMORYTYPE_UNIFIED = 4,
    MLC_CU_STREAM_NON_BLOCKING = 1,
    MLC_CU_EVENT_DISABLE_TIMING = 2
};

/* The driver's entry points that staging calls (the _v2 ABI where CUDA has one). */
typedef struct mlc_cuda {
    void *library; /* dlopen handle; NULL: not loaded */
    CUresult (*init)(unsigned int flags);
    CUresult (*device_get)(CUdevice *device, int ordinal);
    CUresult (*primary_ctx_retain)(CUcontext *ctx, CUdevice device);
    CUresult (*primary_ctx_release)(CUdevice device);
    CUresult (*ctx_get_current)(CUcontext *ctx);
    CUresult (*ctx_set_current)(CUcontext ctx);
    CUresult (*pointer_get_attribute)(void *data, int attribute, CUdeviceptr ptr);
    CUresult (*mem_host_alloc)(void **ptr, size_t bytes, unsigned int flags);
    CUresult (*mem_free_host)(void *ptr);
    CUresult (*stream_create)(CUstream *stream, unsigned int flags);
    CUresult (*stream_destroy)(CUstream stream);
    CUresult (*stream_synchronize)(CUstream stream);
    CUresult (*stream_wait_event)(CUstream stream, CUevent event, unsigned int flags);
    CUresult (*event_create)(CUevent *event, unsigned int flags);
    CUresult (*event_destroy)(CUevent event);
    CUresult (*event_record)(CUevent event, CUstream stream);
    CUresult (*event_synchronize)(CUevent event);
    CUresult (*event_elapsed_time)(float *ms, CUevent start, CUevent end);
    CUresult (*memcpy_dtoh_async)(void *dst, CUdeviceptr src, size_t bytes, CUstream stream);
    CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
    CUresult (*get_error_name)(CUresult error, const char **name);
} mlc_cuda;

/* Load the driver from `library` (a file name or path; NULL or "": "libcuda.so.1") and
 * initialise it. MLC_OK, or MLC_ERR_STATE with why in err. */
int mlc_cuda_open(mlc_cuda *cu, const char *library, char *err, size_t errlen);
void mlc_cuda_close(mlc_cuda *cu);
/* "CUDA_ERROR_INVALID_VALUE" and the like ("CUDA error <n>" where the driver has no name). */
const char *mlc_cuda_error_name(const mlc_cuda *cu, CUresult error, char *buf, size_t len);

#endif
