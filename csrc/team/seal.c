/* A keyed group's seal: after its data moved, the ranks learn whether some rank's
 * step failed under it, before any of its tensors is handed back.
 *
 * A group's signature is exchanged when it opens (without the finite check), so
 * a step that fails afterwards on one rank only cannot show in it: the failing
 * rank cancels the group (group.c) and carries its data to the end with zeros in
 * place of the missing tensors, and the other ranks would return those sums as
 * their step's result. So a group holds back its tensors' done callbacks (at more
 * than one rank), and once every lane of this rank is through the group's data
 * and every tensor arrived, lane 0 runs the seal on its own communicator:
 *
 * Steps: each rank puts {its rank, -its rank} if it cancelled the group, else
 * {INT64_MAX, INT64_MAX}; a recursive-doubling allreduce (min) of these two int64
 * gives every rank the lowest and (negated) highest rank that cancelled. Lane 0
 * of every rank reaches the seal at the same place in its communicator's
 * messages (lanes take requests in queue order, and every rank plans the group
 * alike), after all of its own segments of the group; the tag is one a segment
 * number reaches only in the largest requests, and MPI keeps one sender's
 * messages of one tag in order anyway.
 * Bytes on the wire per rank: 16 bytes, ceil(log2 n) times each way (2 more for
 * a rank in the fold); log2(p) (+2) message latencies per group.
 *
 * A rank cancels before it marks the missing tensors arrived, and its lanes can
 * finish only after that, so its own flag is set when it seals; the other ranks'
 * seals need its seal's messages. Every rank therefore hears of the cancel in
 * the same step, and every rank's tensors of that group fail with a message that
 * names the ranks (MLC_ERR_MISMATCH: the ranks disagree on whether the step
 * failed). */
#include <stdint.h>
#include <stdio.h>

#include "algos/algo.h"
#include "team.h"

#define MLC_SEAL_TAG (MLC_TAG_SPACE - 1)

int mlc_seal_wanted(const mlc_request *req) { return req->group && req->team->ctx->size > 1; }

/* Under the team lock: this lane is through its segments of req. */
void mlc_seal_lane_done(mlc_request *req) {
    req->lanes_running--;
    pthread_cond_broadcast(&req->team->groups.ready_cv);
}

int mlc_seal(mlc_request *req, mlc_tp *tp, char *scratch, int64_t scratch_bytes, char *message) {
    mlc_team *team = req->team;
    pthread_mutex_lock(&team->lock);
    while (req->lanes_running > 0) pthread_cond_wait(&team->groups.ready_cv, &team->lock);
    const int cancelled = req->fault.cancelled;
    pthread_mutex_unlock(&team->lock);

    int64_t ranks[2] = {INT64_MAX, INT64_MAX};
    if (cancelled) {
        ranks[0] = tp->rank;
        ranks[1] = -(int64_t)tp->rank;
    }
    const mlc_segment seg = {(char *)ranks, NULL, 2, MLC_SEAL_TAG};
    const mlc_algo_call call = {MLC_INT64, (int)sizeof(int64_t), MLC_OP_MIN, &seg, 1, scratch,
                                scratch_bytes, MLC_COMPRESSION_NONE};
    int rc = mlc_allreduce_recursive_doubling(tp, &call);
    if (rc) {
        snprintf(message, MLC_MSG_LEN, "team %d request %lld: the check that no rank's step failed "
                 "under it could not complete (%s)", team->agree.dog.team_id, (long long)req->seq,
                 mlc_status_name(rc));
        return rc;
    }
    if (ranks[0] == INT64_MAX) return MLC_OK;
    const long long low = (long long)ranks[0], high = -(long long)ranks[1];
    int off = snprintf(message, MLC_MSG_LEN,
                       "team %d request %lld (keyed group %lld) failed on every rank: the step that "
                       "submitted it failed on rank %lld",
                       team->agree.dog.team_id, (long long)req->seq, (long long)mlc_group_key(req), low);
    if (high != low && off > 0 && off < MLC_MSG_LEN)
        off += snprintf(message + off, MLC_MSG_LEN - off, " and on other ranks up to rank %lld", high);
    if (off > 0 && off < MLC_MSG_LEN)
        snprintf(message + off, MLC_MSG_LEN - off,
                 " (cancelled there: a framework op of that step raised). Its tensors were not "
                 "returned on any rank; the next steps go on");
    return MLC_ERR_MISMATCH; /* the ranks disagree on whether the step failed */
}
