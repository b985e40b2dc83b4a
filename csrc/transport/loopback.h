/* Loopback transport: the ranks of a job are threads of one process. Tests run
 * the algorithms and the agreement exchange on it at 1-16 ranks without MPI. */
#ifndef MLC_TRANSPORT_LOOPBACK_H
#define MLC_TRANSPORT_LOOPBACK_H

#include "transport.h"

typedef struct mlc_loopback mlc_loopback;

mlc_loopback *mlc_loopback_create(int size);
void mlc_loopback_destroy(mlc_loopback *lb);
/* Rank `rank`'s endpoint; message receives error texts (MLC_MSG_LEN bytes). */
void mlc_loopback_open(mlc_loopback *lb, int rank, mlc_tp *tp, char *message);
/* Receives still posted at `rank`: none may be left behind after an error. */
int mlc_loopback_posted(mlc_loopback *lb, int rank);
/* Messages sent to `rank` that no receive took: none may be left behind either. */
int mlc_loopback_queued(mlc_loopback *lb, int rank);
/* Those of them sent with tag (tag < 0: any). */
int mlc_loopback_queued_tag(mlc_loopback *lb, int rank, int tag);
/* Fault injection: rank's sends after the next `after` fail (after < 0: never). */
void mlc_loopback_fail_sends(mlc_loopback *lb, int rank, int after);

#endif
