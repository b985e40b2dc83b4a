/* Ranks at different places in their programs: another call, steps marked on some ranks
 * only, an API call against a compiled step's op, or another calling thread. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "verdict.h"

/* (step, call) of x against y's: < 0, 0, > 0. */
static int call_order(const compared *x, const compared *y) {
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->call_index < y->call_index ? -1 : x->call_index > y->call_index;
}

int mlc_same_call(const table *t, int a, int b, const setting *s) {
    (void)s;
    return call_order(&at(t, a)->c, &at(t, b)->c) == 0;
}

/* Whether the request carries a call of the API (the NumPy-level API's, whose calls are
 * counted): a framework's op (a traced or compiled step's) carries none. */
static int has_call(const compared *c) {
    return c->step != 0 || c->call_index != 0;
}

static int calls_alike(const table *t, int a, int b, const setting *s) {
    (void)s;
    return has_call(&at(t, a)->c) == has_call(&at(t, b)->c);
}

static int marks_alike(const table *t, int a, int b, const setting *s) {
    (void)s;
    return (at(t, a)->c.step != 0) == (at(t, b)->c.step != 0);
}

static int same_origin(const table *t, int a, int b, const setting *s) {
    (void)s;
    return at(t, a)->c.origin == at(t, b)->c.origin;
}

static void append_call(char *buf, size_t len, size_t *off, const compared *c) {
    if (c->step) mlc_append(buf, len, off, "step %lld, call %lld", (long long)c->step, (long long)c->call_index);
    else mlc_append(buf, len, off, "call %lld", (long long)c->call_index);
}

/* After a line on calls of different kinds: what each rank submitted, where the shapes
 * differ too (a rank whose data ran out, making its next call while the others are in a
 * step). */
static void append_shapes_if_they_differ(const table *t, char *buf, size_t len, size_t *off) {
    for (int r = 1; r < t->n; r++) {
        if (mlc_same_shape(at(t, 0), at(t, r))) continue;
        mlc_append(buf, len, off, "; and what they submitted differs: ");
        mlc_shape_message(t, buf, len, off);
        return;
    }
}

/* Ranks whose calls differ. Every rank's call that is behind the furthest fails: those
 * ranks left the step early or skipped calls, and this rank's call has no partners. The
 * ranks furthest on exchange again (MLC_AGREE_RETRY) against the others' next calls, so
 * that the ranks realign with no call paired to another. Ranks that disagree on whether
 * they mark steps at all cannot be ordered, nor a framework's op against a call of the
 * API (a JAX step's custom call that runs after an API call on one rank and before it on
 * another): every rank fails, each request pairing with no other. */
int mlc_calls_message(const table *t, int rank, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    for (int r = 1; r < t->n; r++) {
        if (calls_alike(t, 0, r, NULL)) continue;
        mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
        for (int q = 0, k = 0; q < t->n; q++) {
            if (!mlc_leads(t, q, calls_alike, NULL)) continue;
            if (k++) mlc_append(buf, len, &off, "; ");
            mlc_append_ranks(buf, len, &off, t, q, calls_alike, NULL);
            mlc_append(buf, len, &off, has_call(&at(t, q)->c) ? ": a call of ml_comm's API"
                                                              : ": an op of a traced or compiled step");
        }
        mlc_append(buf, len, &off, ". A step's ops and the API's calls on one team must come in the same order on "
                                   "every rank (a JAX step runs after the call that dispatched it has returned): let "
                                   "the step finish before an API call on its team, or use another team");
        append_shapes_if_they_differ(t, buf, len, &off);
        return MLC_ERR_MISMATCH;
    }
    for (int r = 1; r < t->n; r++) {
        if (marks_alike(t, 0, r, NULL)) continue;
        mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
        for (int q = 0, k = 0; q < t->n; q++) {
            if (!mlc_leads(t, q, marks_alike, NULL)) continue;
            if (k++) mlc_append(buf, len, &off, "; ");
            mlc_append_ranks(buf, len, &off, t, q, marks_alike, NULL);
            mlc_append(buf, len, &off, at(t, q)->c.step ? " mark their steps (ml_comm.step)" : " mark no steps");
        }
        mlc_append(buf, len, &off, ". Every rank must mark its steps alike");
        append_shapes_if_they_differ(t, buf, len, &off);
        return MLC_ERR_MISMATCH;
    }
    int furthest = 0;
    for (int r = 1; r < t->n; r++)
        if (call_order(&at(t, r)->c, &at(t, furthest)->c) > 0) furthest = r;
    const compared *mine = &at(t, rank)->c, *best = &at(t, furthest)->c;
    if (call_order(mine, best) == 0) return MLC_AGREE_RETRY;
    mlc_append(buf, len, &off, "team %d request %lld failed: ", team_id, (long long)a->seq);
    mlc_append_ranks(buf, len, &off, t, furthest, mlc_same_call, NULL);
    int ahead = 0;
    for (int r = furthest; r < t->n; r++) ahead += mlc_same_call(t, furthest, r, NULL);
    mlc_append(buf, len, &off, ahead == 1 ? " is at " : " are at ");
    append_call(buf, len, &off, best);
    mlc_append(buf, len, &off, " on this team, this rank at ");
    append_call(buf, len, &off, mine);
    if (best->step != mine->step)
        mlc_append(buf, len, &off, " (%lld step%s behind)", (long long)(best->step - mine->step),
                   best->step - mine->step == 1 ? "" : "s");
    else
        mlc_append(buf, len, &off, " (%lld call%s behind)", (long long)(best->call_index - mine->call_index),
                   best->call_index - mine->call_index == 1 ? "" : "s");
    mlc_append(buf, len, &off, best->step ? ": they left a step early (an exception there?) or skipped calls"
                                          : ": they made calls this rank did not (one that raised there before "
                                            "it reached the others, or one this rank skipped?)");
    mlc_append(buf, len, &off, ". This call fails on this rank, and they wait for its next one");
    return MLC_ERR_MISMATCH;
}

/* Whether the ranks' calls came from threads of different names. A call signed with no
 * thread (origin 0: a framework's thread, or a hook that runs on whichever thread the
 * framework runs it) is compared with none. */
int mlc_origins_differ(const table *t) {
    uint64_t named = 0;
    for (int r = 0; r < t->n; r++) {
        const uint64_t origin = at(t, r)->c.origin;
        if (!origin) continue;
        if (named && origin != named) return 1;
        named = origin;
    }
    return 0;
}

/* Ranks on the same call from threads of different names. */
int mlc_origin_message(const table *t, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
    for (int r = 0, k = 0; r < t->n; r++) {
        if (!mlc_leads(t, r, same_origin, NULL)) continue;
        if (k++) mlc_append(buf, len, &off, "; ");
        mlc_append_ranks(buf, len, &off, t, r, same_origin, NULL);
        mlc_append(buf, len, &off, " called from thread '%s'", at(t, r)->origin_name);
    }
    mlc_append(buf, len, &off, ". One thread at a time drives a team, a thread of the same name on every rank "
                               "(another thread: another team)");
    return MLC_ERR_MISMATCH;
}
