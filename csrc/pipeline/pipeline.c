/* Pipelined teams (config_team ksteps < max_steps): what each gradient call of a pipeline
 * does. One pipeline per team and gradient layout; the core decides, the front end (NumPy,
 * the TensorFlow op, the scale model) moves the data.
 *
 * Steps of call c (its phase is mlc_step_phase(c, ksteps, max_steps), base/schedule.c):
 *   SYNC            reduce this call's gradients now; return their average (with a
 *                   reduction still to return, a rank a call behind: as DRAIN)
 *   PIPELINE_START  start this call's reduction (on copies); return zeros (with a
 *                   reduction still to return: as PIPELINED)
 *   PIPELINED       finish the previous call's reduction; start this one's; return the
 *                   previous average (zeros if there is none: it failed, or was dropped)
 *   DRAIN           finish the previous call's reduction; reduce this call's now; return
 *                   both summed (this call's alone if there is no previous)
 * A call that finds the previous reduction failed raises its error. Where steps are not
 * marked it starts nothing, so the next call finds none: the pipeline starts afresh,
 * returning zeros once, on every rank alike. Where they are (ml_comm.step, Keras's steps
 * on TensorFlow) it first does its own part: it starts its reduction, or reduces now and
 * hands the average over as its reduction (mlc_pipeline_started), and the next call
 * returns it, so the call's gradients are returned once, as on a rank whose call did not
 * raise. That is how the ranks realign when one of them left a step before its call (an
 * exception it went on from): the others' reduction of that step finds them behind
 * (agree/verdict_calls.c) and fails; their next call raises it and starts its own, which
 * meets that rank's. Each rank returns the same averages in the same order, the failed
 * step's on none. (Without marks the ranks' requests look alike, and nothing tells a rank
 * that left a step.) That rank's calls stay one behind the others' in the phases below:
 * a call that returns a reduction returns it whatever its phase, so the pipeline's
 * averages still come back once (leaving, it returns the last one at its next call).
 *
 * A call's place (step, index in the step) is what its requests carry where the front
 * end makes them outside a call of the API (the TensorFlow op, mlc_team_allreduce_async_at).
 * Nothing here sends bytes; the reductions are the team's ordinary requests. */
#include "base/base.h"

void mlc_pipeline_init(mlc_pipeline *p, int64_t ksteps, int64_t max_steps) {
    *p = (mlc_pipeline){0, ksteps, max_steps, 0, 0, NULL};
}

mlc_pipeline_turn mlc_pipeline_next(mlc_pipeline *p, int64_t step) {
    if (step < 0) step = 0;
    p->index = step > 0 && step == p->step ? p->index + 1 : 0;
    p->step = step;
    mlc_pipeline_turn t = {mlc_step_phase(p->calls++, p->ksteps, p->max_steps), p->in_flight, 0, 0, MLC_RESULT_NOW,
                           step, step > 0 ? p->index : 0, step == 0};
    p->in_flight = NULL;
    switch (t.phase) {
    case MLC_STEP_PIPELINE_START: /* with a reduction to return (a rank a call behind): as PIPELINED */
    case MLC_STEP_PIPELINED:
        t.start = 1;
        t.result = t.finish ? MLC_RESULT_PREVIOUS : MLC_RESULT_ZEROS;
        break;
    default: /* DRAIN, and SYNC with a reduction to return (a rank a call behind) */
        t.reduce_now = 1;
        t.result = t.finish ? MLC_RESULT_BOTH : MLC_RESULT_NOW;
    }
    return t;
}

void mlc_pipeline_started(mlc_pipeline *p, void *reduction) { p->in_flight = reduction; }
