/* Binomial-tree broadcast of one segment from root.
 *
 * Steps: a rank receives the segment from its parent (relative rank with the
 * lowest set bit cleared), then sends it to its children, largest subtree first.
 * Bytes on the wire: N per receiving rank; the root sends ceil(log2 n) * N.
 * ceil(log2 n) message latencies. Large broadcasts are cut into segments that the
 * team's threads send concurrently, so the tree levels of different segments overlap.
 */
#include "algo.h"

int mlc_broadcast_binomial(mlc_tp *tp, char *buf, int64_t bytes, int root, int tag) {
    int children[64];
    int rc, parent = mlc_binomial_parent(tp->rank, root, tp->size);
    int nchildren = mlc_binomial_children(tp->rank, root, tp->size, children, 64);

    if (parent >= 0 && (rc = mlc_tp_recv(tp, buf, bytes, parent, tag))) return rc;
    for (int i = 0; i < nchildren; i++)
        if ((rc = mlc_tp_send(tp, buf, bytes, children[i], tag))) return rc;
    return MLC_OK;
}
