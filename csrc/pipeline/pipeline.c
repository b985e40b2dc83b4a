/* Pipelined teams (config_team ksteps < max_steps): what each gradient call of a pipeline
 * does. One pipeline per team and gradient layout; the core decides, the front end (NumPy,
 * the TensorFlow op, the scale model) moves the data.
 *
 * Steps of call c (its phase is mlc_step_phase(c, ksteps, max_steps), base/schedule.c):
 *   SYNC            reduce this call's gradients now; return their average
 *   PIPELINE_START  start this call's reduction (on copies); return zeros
 *   PIPELINED       finish the previous call's reduction; start this one's; return the
 *                   previous average (zeros if there is none: it failed, or was dropped)
 *   DRAIN           finish the previous call's reduction; reduce this call's now; return
 *                   both summed (this call's alone if there is no previous)
 * A call that finds the previous reduction failed raises its error and starts nothing,
 * so the next call finds none: the pipeline starts afresh, returning zeros once, on every
 * rank alike. Nothing here sends bytes; the reductions are the team's ordinary requests. */
#include "base/base.h"

void mlc_pipeline_init(mlc_pipeline *p, int64_t ksteps, int64_t max_steps) {
    *p = (mlc_pipeline){0, ksteps, max_steps, NULL};
}

mlc_pipeline_turn mlc_pipeline_next(mlc_pipeline *p) {
    mlc_pipeline_turn t = {mlc_step_phase(p->calls++, p->ksteps, p->max_steps), p->in_flight, 0, 0, MLC_RESULT_NOW};
    p->in_flight = NULL;
    switch (t.phase) {
    case MLC_STEP_PIPELINE_START:
        t.start = 1;
        t.result = MLC_RESULT_ZEROS;
        break;
    case MLC_STEP_PIPELINED:
        t.start = 1;
        t.result = t.finish ? MLC_RESULT_PREVIOUS : MLC_RESULT_ZEROS;
        break;
    case MLC_STEP_DRAIN:
        t.reduce_now = 1;
        t.result = t.finish ? MLC_RESULT_BOTH : MLC_RESULT_NOW;
        break;
    default: /* SYNC: a reduction still in flight (none, by the phases' order) is dropped */
        t.reduce_now = 1;
        t.result = MLC_RESULT_NOW;
    }
    return t;
}

void mlc_pipeline_started(mlc_pipeline *p, void *reduction) { p->in_flight = reduction; }
