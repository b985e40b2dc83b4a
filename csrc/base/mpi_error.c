#include <stdio.h>

#include "mpi_error.h"

int mlc_mpi_error(char *message, int mpi_code, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpi_code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", mpi_code);
    if (message) snprintf(message, MLC_MSG_LEN, "%s failed: %.200s", what, text);
    return MLC_ERR_MPI;
}
