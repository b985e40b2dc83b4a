/* Leaving a job safely: is a peer waiting for this rank on one of a team's
 * communicators?
 *
 * Every message a peer sends within a team operation is received by this rank
 * before this rank's part of that operation completes. So when this rank has no
 * operation of its own in flight on the team, an unreceived message on one of the
 * team's communicators means the peer is inside an operation this rank has not
 * made. If this rank is leaving (finalize, or the end of the script), that peer
 * waits forever: the caller aborts the job instead, naming the peer.
 *
 * MPI_Iprobe only looks; the message stays queued. Collectives that MPI runs
 * internally (MPI_Barrier) are invisible here, and so is a peer that only
 * receives from this rank (a broadcast rooted here); the stall watchdog covers
 * those.
 *
 * One exchange sends this rank nothing before this rank sends: where the job's size
 * is no power of two, a rank r >= p folds its record into r - p first
 * (agree/exchange.c), so r - p waits for r in silence. Its wait announces itself
 * once it passes half the stall warning limit (agree/arrivals.c): a notice of an
 * exchange this rank never entered (its round at least this rank's count of
 * exchanges) names a peer that waits for it; an older one is a stall that ended. */
#include "team.h"

static int probe(MPI_Comm comm, int tag) {
    int flag = 0;
    MPI_Status status;
    if (comm == MPI_COMM_NULL) return -1;
    if (MPI_Iprobe(MPI_ANY_SOURCE, tag, comm, &flag, &status) != MPI_SUCCESS) return -1;
    return flag ? status.MPI_SOURCE : -1;
}

/* A peer whose arrival notice names an exchange this rank never entered; -1 none,
 * -2 while this rank's own exchange runs. Notices to a rank that never stalled wait
 * unreceived (it posted no receives for them): taken here into what the arrivals keep,
 * so that the answer holds at the next look (a barrier's check looks for seconds) and
 * a later stall of this rank's counts them as heard. */
static int notice_of_later_exchange(mlc_team *team) {
    mlc_agree *ag = &team->agree;
    if (pthread_mutex_trylock(&ag->exchange_lock) != 0) return -2;
    while (!ag->arrivals.posted && team->agree_comm != MPI_COMM_NULL) {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        if (MPI_Improbe(MPI_ANY_SOURCE, MLC_AGREE_NOTICE_TAG, team->agree_comm, &flag, &message, &status) !=
                MPI_SUCCESS ||
            !flag)
            break;
        int64_t round = -1;
        if (MPI_Mrecv(&round, (int)sizeof round, MPI_BYTE, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
        mlc_arrivals_heard(&ag->arrivals, status.MPI_SOURCE, round);
    }
    const int source = mlc_arrivals_waiting_in(&ag->arrivals, &ag->tp, ag->rounds);
    pthread_mutex_unlock(&ag->exchange_lock);
    return source;
}

int mlc_team_waiting_peer(mlc_team *team) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!team || finalized) return -1;
    pthread_mutex_lock(&team->lock);
    /* With a request of its own queued, this rank is still taking part. */
    int busy = team->head != NULL || team->groups.open != NULL;
    pthread_mutex_unlock(&team->lock);
    /* ... and so it is while another of its threads runs a blocking call inline. */
    if (!busy && pthread_mutex_trylock(&team->caller.lock) == 0) pthread_mutex_unlock(&team->caller.lock);
    else busy = 1;
    if (busy) return -2;
    /* Every team operation starts with the agreement check's message (agree/exchange.c);
     * a stall's arrival notices are no operation (a rank that never stalled leaves
     * them unreceived). */
    int source = probe(team->agree_comm, MLC_AGREE_TREE_TAG);
    if (source < 0) source = probe(team->agree_comm, MLC_AGREE_TABLE_TAG);
    if (source < 0) source = probe(team->caller.comm, MPI_ANY_TAG);
    for (int i = 0; source < 0 && i < team->nthreads; i++) source = probe(team->workers[i].comm, MPI_ANY_TAG);
    return source >= 0 ? source : notice_of_later_exchange(team);
}
