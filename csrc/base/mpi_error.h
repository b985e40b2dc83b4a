/* MPI's text for an MPI error code, for the layers that call MPI. */
#ifndef MLC_MPI_ERROR_H
#define MLC_MPI_ERROR_H

#include <mpi.h>

#include "base.h"

/* Writes "<what> failed: <MPI's text>" into message (MLC_MSG_LEN bytes, may be
 * NULL) and returns MLC_ERR_MPI. */
int mlc_mpi_error(char *message, int mpi_code, const char *what);

#endif
