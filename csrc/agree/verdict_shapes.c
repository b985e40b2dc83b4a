/* Ranks on the same call that submitted different requests: the shapes, the labels, the
 * team's and the plan's settings, each named with the ranks that hold it; and NaN/Inf
 * that the finite check found. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "verdict.h"

int mlc_same_shape(const mlc_signature *a, const mlc_signature *b) {
    const compared *x = &a->c, *y = &b->c;
    return x->kind == y->kind && x->dtype == y->dtype && x->op == y->op && x->root == y->root &&
           x->ntensors == y->ntensors && x->total == y->total && x->layout_hash == y->layout_hash &&
           x->shapes_hash == y->shapes_hash && x->labels_hash == y->labels_hash &&
           x->part == y->part && x->nparts == y->nparts && x->call_dtypes == y->call_dtypes &&
           x->compression == y->compression && x->sizes_vary == y->sizes_vary &&
           x->row_elements == y->row_elements && x->row_ndim == y->row_ndim &&
           x->row_shape_hash == y->row_shape_hash && x->cancelled == y->cancelled;
}

/* ---- the settings, each with its name and how its value reads ---- */

typedef struct setting {
    const char *name;
    int team; /* the team's schedule; the others follow from the plan */
    int64_t (*get)(const compared *c);
    void (*show)(int64_t v, char *buf, size_t len);
} setting;

static void show_number(int64_t v, char *buf, size_t len) { snprintf(buf, len, "%lld", (long long)v); }
static void show_algorithm(int64_t v, char *buf, size_t len) {
    snprintf(buf, len, "%s", v < 0 ? "none (broadcast)" : mlc_algorithm_name((int)v));
}
static void show_yes_no(int64_t v, char *buf, size_t len) { snprintf(buf, len, "%s", v ? "yes" : "no"); }
static void show_thread(int64_t v, char *buf, size_t len) {
    snprintf(buf, len, "%s", v ? "the caller's" : "the team's");
}

static int64_t team_algorithm(const compared *c) { return c->team_algorithm; }
static int64_t ksteps(const compared *c) { return c->ksteps; }
static int64_t max_steps(const compared *c) { return c->max_steps; }
static int64_t algorithm(const compared *c) { return c->algorithm; }
static int64_t on_caller(const compared *c) { return c->on_caller; }
static int64_t lanes(const compared *c) { return c->lanes; }
static int64_t seg_elems(const compared *c) { return c->seg_elems; }
static int64_t is_group(const compared *c) { return c->is_group; }
static int64_t direct(const compared *c) { return c->direct; }

static const setting SETTINGS[] = {
    {"config_team alg", 1, team_algorithm, show_algorithm},
    {"config_team ksteps", 1, ksteps, show_number},
    {"config_team max_steps", 1, max_steps, show_number},
    {"the planned algorithm", 0, algorithm, show_algorithm},
    {"the thread that runs it", 0, on_caller, show_thread},
    {"lanes (threads)", 0, lanes, show_number},
    {"segment length (elements)", 0, seg_elems, show_number},
    {"keyed group", 0, is_group, show_yes_no},
    {"allreduce inside the check (ML_COMM_DIRECT_BYTES)", 0, direct, show_yes_no},
};
enum { NSETTINGS = sizeof SETTINGS / sizeof *SETTINGS };

static int shape_alike(const table *t, int a, int b, const setting *s) {
    return mlc_same_shape(at(t, a), at(t, b));
}
static int setting_alike(const table *t, int a, int b, const setting *s) {
    return s->get(&at(t, a)->c) == s->get(&at(t, b)->c);
}

/* Alike but for the tensors' shapes (one count, other dimensions). */
static int shapes_alike(const table *t, int a, int b, const setting *s) {
    return at(t, a)->c.shapes_hash == at(t, b)->c.shapes_hash;
}

/* Alike but for the labels the front end gave the tensors. */
static int labels_alike(const table *t, int a, int b, const setting *s) {
    return at(t, a)->c.labels_hash == at(t, b)->c.labels_hash;
}

/* Alike but for the tensors' shapes and labels. */
static int shapes_and_labels_alike(const table *t, int a, int b, const setting *s) {
    return shapes_alike(t, a, b, s) && labels_alike(t, a, b, s);
}

/* Every rank alike to rank 0 but in the digests of compared at offsets a and b
 * (shapes_hash, labels_hash; a == b: one of them). */
static int differ_only_in(const table *t, size_t a, size_t b) {
    const mlc_signature *first = at(t, 0);
    for (int r = 1; r < t->n; r++) {
        compared x = at(t, r)->c;
        memcpy((char *)&x + a, (const char *)&first->c + a, sizeof(uint64_t));
        memcpy((char *)&x + b, (const char *)&first->c + b, sizeof(uint64_t));
        if (!mlc_same_shape(&(mlc_signature){.c = x}, first)) return 0;
    }
    return 1;
}

/* "every rank submitted ..., but <what> differ between ranks 0, 2 and rank 1. <rule>":
 * where the description would read the same for every rank. */
static void alike_but_message(const table *t, char *buf, size_t len, size_t *off, alike_fn alike,
                              const char *what, const char *rule) {
    int groups = 0;
    for (int r = 0; r < t->n; r++) groups += mlc_leads(t, r, alike, NULL);
    mlc_append(buf, len, off, "every rank submitted ");
    mlc_append_signature(buf, len, off, at(t, 0), 1, 0);
    mlc_append(buf, len, off, ", but %s differ between ", what);
    for (int r = 0, k = 0; r < t->n; r++) {
        if (!mlc_leads(t, r, alike, NULL)) continue;
        mlc_append(buf, len, off, "%s", !k ? "" : ++k == groups ? " and " : ", ");
        if (!k) k = 1;
        mlc_append_ranks(buf, len, off, t, r, alike, NULL);
    }
    mlc_append(buf, len, off, ". %s", rule);
}

void mlc_shape_message(const table *t, char *buf, size_t len, size_t *off) {
    const mlc_signature *first = at(t, 0);
    int show_counts = 0, show_dtypes = 0;
    const size_t shapes = offsetof(compared, shapes_hash), labels = offsetof(compared, labels_hash);
    static const char same_calls[] = "Every rank must make the same calls, with the same tensors, in the same order";
    static const char by_order[] = "Calls are paired by their order on the team, not by name: every rank must make "
                                   "the same calls, with the same names and reductions, in the same order";
#define MLC_LABELS "labels (ml_comm.horovod: each tensor's name=, the op and the scale factors)"
    if (differ_only_in(t, shapes, shapes)) {
        alike_but_message(t, buf, len, off, shapes_alike, "the tensors' shapes (their dimensions)", same_calls);
        return;
    }
    if (differ_only_in(t, labels, labels)) {
        alike_but_message(t, buf, len, off, labels_alike, "the tensors' " MLC_LABELS, by_order);
        return;
    }
    if (differ_only_in(t, shapes, labels)) {
        alike_but_message(t, buf, len, off, shapes_and_labels_alike,
                          "the tensors' shapes (their dimensions) and " MLC_LABELS, by_order);
        return;
    }
#undef MLC_LABELS
    for (int r = 1; r < t->n; r++) {
        if (at(t, r)->c.ntensors == first->c.ntensors && at(t, r)->c.total == first->c.total &&
            at(t, r)->c.layout_hash != first->c.layout_hash)
            show_counts = 1;
        compared x = at(t, r)->c; /* differing only in what the description leaves out */
        x.call_dtypes = first->c.call_dtypes;
        show_dtypes |= at(t, r)->c.call_dtypes != first->c.call_dtypes && mlc_same_shape(&(mlc_signature){.c = x}, first);
    }
    for (int r = 0, k = 0; r < t->n; r++) {
        if (!mlc_leads(t, r, shape_alike, NULL)) continue;
        if (k++) mlc_append(buf, len, off, "; ");
        mlc_append_ranks(buf, len, off, t, r, shape_alike, NULL);
        mlc_append(buf, len, off, " submitted ");
        mlc_append_signature(buf, len, off, at(t, r), show_counts, show_dtypes);
    }
    mlc_append(buf, len, off, ". Every rank must make the same calls, with the same tensors, in the same order");
}

/* "config_team ksteps: ranks 0, 2: 3; rank 1: 0", for each setting of the team's
 * schedule (team = 1) or of the plan (team = 0) that differs; how many. */
static int append_settings(const table *t, int team, char *buf, size_t len, size_t *off) {
    int k = 0;
    for (int i = 0; i < NSETTINGS; i++) {
        const setting *s = &SETTINGS[i];
        if (s->team != team) continue;
        int differs = 0;
        for (int r = 1; r < t->n; r++) differs |= !setting_alike(t, 0, r, s);
        if (!differs) continue;
        mlc_append(buf, len, off, "%s%s: ", k++ ? "; " : "", s->name);
        for (int r = 0, g = 0; r < t->n; r++) {
            if (!mlc_leads(t, r, setting_alike, s)) continue;
            char value[64];
            s->show(s->get(&at(t, r)->c), value, sizeof value);
            if (g++) mlc_append(buf, len, off, "; ");
            mlc_append_ranks(buf, len, off, t, r, setting_alike, s);
            mlc_append(buf, len, off, ": %s", value);
        }
    }
    return k;
}

/* The team's schedule first (a pipelined rank also submits differently), then the
 * shapes, or else the plan's settings (they follow from the shapes). */
int mlc_mismatch_message(const table *t, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
    int shapes_differ = 0;
    for (int r = 1; r < t->n; r++) shapes_differ |= !mlc_same_shape(at(t, 0), at(t, r));
    int named = append_settings(t, 1, buf, len, &off);
    if (named) mlc_append(buf, len, &off, ". Every rank must call config_team alike");
    if (shapes_differ) {
        if (named) mlc_append(buf, len, &off, "; and ");
        mlc_shape_message(t, buf, len, &off);
    } else if (!named) {
        append_settings(t, 0, buf, len, &off);
        mlc_append(buf, len, &off, ". Every rank must configure the team alike (config_team, "
                                   "ML_COMM_* variables) and call it alike (blocking or not, "
                                   "keyed group or not; in TensorFlow, eagerly on every rank or "
                                   "inside tf.function on every rank)");
    }
    return MLC_ERR_MISMATCH;
}

int mlc_nonfinite_message(const table *t, int team_id, mlc_agreement *a) {
    char desc[MLC_MSG_LEN / 2], *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    mlc_describe_input(&a->in, desc, sizeof desc);
    buf[0] = '\0';
    mlc_append(buf, len, &off, "NaN or Inf in the input of team %d request %lld (%s): ", team_id,
               (long long)a->seq, desc);
    a->nonfinite_ranks = 0;
    for (int r = 0; r < t->n; r++) {
        const mlc_signature *s = at(t, r);
        if (s->nonfinite_tensor < 0) continue;
        if (a->nonfinite_ranks++ == 0) {
            a->nonfinite_rank = r;
            a->nonfinite_tensor = s->nonfinite_tensor;
        } else {
            mlc_append(buf, len, &off, "; ");
        }
        mlc_append(buf, len, &off, "rank %d tensor %d", r, s->nonfinite_tensor);
        if (s->nonfinite_count > 1)
            mlc_append(buf, len, &off, " (and %d more of its tensors)", s->nonfinite_count - 1);
    }
    return MLC_ERR_NONFINITE;
}
