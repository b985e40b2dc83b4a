/* Version and status text: what the public API reports for its codes. */
#include "base.h"

const char *mlc_version(void) { return MLC_VERSION; }

const char *mlc_status_name(int status) {
    switch (status) {
    case MLC_OK: return "ok";
    case MLC_ERR_ARG: return "invalid argument";
    case MLC_ERR_NOMEM: return "out of memory";
    case MLC_ERR_MPI: return "MPI error";
    case MLC_ERR_THREAD_LEVEL: return "MPI is not initialised with MPI_THREAD_MULTIPLE";
    case MLC_ERR_STATE: return "object is shut down";
    case MLC_PENDING: return "pending";
    case MLC_ERR_MISMATCH: return "ranks disagree on the request";
    case MLC_ERR_NONFINITE: return "NaN or Inf in the input";
    case MLC_ERR_OVERFLOW: return "float16 overflow on the wire";
    case MLC_ERR_STALL: return "a wait passed the stall limit";
    case MLC_ERR_PEER_LOST: return "a rank left the job";
    default: return "unknown status";
    }
}
