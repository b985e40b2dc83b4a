/* The check that a job shares its weights before a model's second step of gradients.
 *
 * Why: ml_comm averages gradients; it never sees weights. A script that forgets to
 * broadcast rank 0's weights starts every rank from weights of its own, applies the same
 * averaged update to each and ends with as many models as ranks, the checkpoint rank 0
 * writes being one of them, and nothing fails. So where the framework layer turns the
 * check on (more than one rank, unless the user turned it off), a model's second step of
 * gradients fails, before it moves anything, until a broadcast or a check of the buffers
 * turns the check off. Not the first step: a lazily built model has its weights only
 * after it, and scripts broadcast then, each model of a GAN after its first step.
 *
 * How: the team keeps the calls of gradients it saw, each with the step it came in. A
 * call is named by the caller, alike in every step: the layout of its gradients (an eager
 * call, a compiled JAX step's) or the graph's key of the call (a TensorFlow graph, whose
 * run is a step: its ops share the step's id). A call seen in an earlier step (an eager
 * call: seen at all) is the second step of its model, and fails; so does every call from
 * then on. Two models averaged on one team in one step (a GAN) are two calls, each
 * refused only in its own second step. Every rank makes the same calls and broadcasts
 * (collectives), so every rank fails the same call. */
#include <pthread.h>
#include <stdio.h>

#include "team.h"

int mlc_team_set_weights_check(mlc_team *team, int on) {
    if (!team) return MLC_ERR_ARG;
    atomic_store(&team->weights.on, on != 0);
    return MLC_OK;
}

/* Under team->lock: whether the call is a later step's (its model's second), recording
 * it where it is new. A full record takes any new call as a later step's: 64 calls
 * before any broadcast are no training script's first step. */
static int seen_before(mlc_team *team, int64_t step, uint64_t call) {
    for (int i = 0; i < team->weights.ncalls; i++)
        if (team->weights.calls[i].call == call) return step == 0 || team->weights.calls[i].step != step;
    if (team->weights.ncalls == MLC_WEIGHTS_CALLS) return 1;
    team->weights.calls[team->weights.ncalls].call = call;
    team->weights.calls[team->weights.ncalls].step = step;
    team->weights.ncalls++;
    return 0;
}

int mlc_team_weights_step(mlc_team *team, int64_t step, uint64_t call, char *err, size_t errlen) {
    if (!team) return MLC_ERR_ARG;
    if (!atomic_load(&team->weights.on)) return MLC_OK;
    /* Under the lock, so that every op of a refused step fails, the first as the others. */
    pthread_mutex_lock(&team->lock);
    if (seen_before(team, step, call)) team->weights.refused = 1;
    const int refused = team->weights.refused;
    pthread_mutex_unlock(&team->lock);
    if (!refused) return MLC_OK;
    if (err && errlen)
        snprintf(err, errlen,
                 "team %d averaged the gradients of a model's second step, but no weights "
                 "were broadcast or checked in this job: unless every rank started from the "
                 "same weights, each rank trains a model of its own. Broadcast rank 0's "
                 "weights once, before the first step or right after it where the first step "
                 "builds them (mc.broadcast(weights); with ml_comm.horovod "
                 "hvd.broadcast_variables(variables, root_rank=0)), or, where every rank "
                 "set them alike (one seed), check them once: mc.check_buffers_match(weights). "
                 "ML_COMM_WEIGHTS_CHECK=0 turns this check off",
                 team->agree.dog.team_id);
    return MLC_ERR_STATE;
}

int mlc_team_weights_refused(mlc_team *team) {
    if (!team) return 0;
    pthread_mutex_lock(&team->lock);
    const int refused = team->weights.refused;
    pthread_mutex_unlock(&team->lock);
    return refused;
}
