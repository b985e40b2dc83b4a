/* The MPI transport: one endpoint per communicator (each thread its own dup). */
#ifndef MLC_TRANSPORT_MPI_H
#define MLC_TRANSPORT_MPI_H

#include <mpi.h>

#include "transport.h"

/* tp sends and receives on *comm, which must outlive it; message receives the
 * text of MPI errors (MLC_MSG_LEN bytes). */
void mlc_tp_mpi_open(mlc_tp *tp, MPI_Comm *comm, int rank, int size, char *message);

#endif
