/* The verdict on n ranks' signatures of one request (mlc_judge), and the messages that
 * name what each rank did where they differ: its call and thread, its arguments where its
 * own check of them failed, the shapes, the team's and the plan's settings, NaN/Inf found
 * by the finite check. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "algos/algo.h"
#include "signature.h"

/* "sum", "average", "min", "max", "product". */
static const char *op_name(int op) {
    static const char *const names[] = {"sum", "average", "min", "max", "product"};
    return op >= 0 && op < MLC_NUM_OPS ? names[op] : "unknown op";
}

static const char *rows_kind_name(int kind) {
    return kind == MLC_KIND_ALLGATHER       ? "allgather"
           : kind == MLC_KIND_REDUCESCATTER ? "reducescatter"
           : kind == MLC_KIND_ALLTOALL      ? "alltoall"
           : kind == MLC_KIND_ALLREDUCE     ? "allreduce"
           : kind == MLC_KIND_BROADCAST     ? "broadcast"
                                            : "request kind";
}

static const mlc_signature *sig(const char *slots, size_t slot_bytes, int r) {
    return (const mlc_signature *)(slots + (size_t)r * slot_bytes);
}

static int same_shape(const mlc_signature *a, const mlc_signature *b) {
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

typedef struct table {
    const char *slots;
    size_t slot_bytes;
    int n;
} table;

static const mlc_signature *at(const table *t, int r) { return sig(t->slots, t->slot_bytes, r); }

/* Two ranks alike for the grouping: the same shape, or the same value of one setting. */
typedef int (*alike_fn)(const table *t, int a, int b, const setting *s);

static int shape_alike(const table *t, int a, int b, const setting *s) {
    return same_shape(at(t, a), at(t, b));
}
static int setting_alike(const table *t, int a, int b, const setting *s) {
    return s->get(&at(t, a)->c) == s->get(&at(t, b)->c);
}

/* "rank 1" or "ranks 0, 2-4": the ranks alike to the leader. */
static void append_ranks(char *buf, size_t len, size_t *off, const table *t, int leader,
                         alike_fn alike, const setting *s) {
    int count = 0;
    for (int r = leader; r < t->n; r++) count += alike(t, leader, r, s);
    mlc_append(buf, len, off, "%s ", count == 1 ? "rank" : "ranks");
    int first = 1;
    for (int r = leader; r < t->n;) {
        if (!alike(t, leader, r, s)) {
            r++;
            continue;
        }
        int end = r;
        while (end + 1 < t->n && alike(t, leader, end + 1, s)) end++;
        if (end == r) mlc_append(buf, len, off, "%s%d", first ? "" : ", ", r);
        else mlc_append(buf, len, off, "%s%d-%d", first ? "" : ", ", r, end);
        first = 0;
        r = end + 1;
    }
}

/* The first rank of each group of alike ranks is its leader. */
static int leads(const table *t, int r, alike_fn alike, const setting *s) {
    for (int q = 0; q < r; q++)
        if (alike(t, q, r, s)) return 0;
    return 1;
}

/* ", shape (2, 3)": the rows' dimensions after the first, where the caller said them. */
static void append_row_shape(char *buf, size_t len, size_t *off, const mlc_signature *sg) {
    const int ndim = sg->c.row_ndim;
    if (ndim < 0) return;
    mlc_append(buf, len, off, " of shape (");
    for (int d = 0; d < ndim && d < MLC_SIG_SHOWN_DIMS; d++)
        mlc_append(buf, len, off, "%s%lld", d ? ", " : "", (long long)sg->row_dims[d]);
    mlc_append(buf, len, off, ndim > MLC_SIG_SHOWN_DIMS ? ", ...)" : ndim == 1 ? ",)" : ")");
}

static void append_signature(char *buf, size_t len, size_t *off, const mlc_signature *sg,
                             int show_counts, int show_dtypes) {
    const compared *s = &sg->c;
    if (s->ntensors == 0 && s->kind == MLC_KIND_ALLREDUCE && !s->call_dtypes) {
        /* the front ends' call of a gradient list with nothing to average */
        mlc_append(buf, len, off, "no tensors (a list that was empty or held only None)");
        return;
    }
    if (s->sizes_vary) {
        mlc_append(buf, len, off, "%d tensor%s, rows of %lld %s elements", s->ntensors,
                   s->ntensors == 1 ? "" : "s", (long long)s->row_elements, mlc_dtype_name(s->dtype));
        append_row_shape(buf, len, off, sg);
    } else
        mlc_append(buf, len, off, "%d tensor%s, %lld %s elements", s->ntensors, s->ntensors == 1 ? "" : "s",
                   (long long)s->total, mlc_dtype_name(s->dtype));
    if (show_counts && s->ntensors > 0) {
        mlc_append(buf, len, off, " of sizes");
        for (int i = 0; i < s->ntensors && i < MLC_SIG_SHOWN_COUNTS; i++)
            mlc_append(buf, len, off, "%s %lld", i ? "," : "", (long long)sg->counts[i]);
        if (s->ntensors > MLC_SIG_SHOWN_COUNTS) mlc_append(buf, len, off, ", ...");
    }
    if (s->kind == MLC_KIND_BROADCAST) mlc_append(buf, len, off, " (broadcast from rank %d", s->root);
    else if (s->kind == MLC_KIND_ALLREDUCE) mlc_append(buf, len, off, " (%s", op_name(s->op));
    else if (s->kind == MLC_KIND_REDUCESCATTER) mlc_append(buf, len, off, " (reducescatter, %s", op_name(s->op));
    else mlc_append(buf, len, off, " (%s", rows_kind_name(s->kind));
    if (s->row_elements && !s->sizes_vary) {
        mlc_append(buf, len, off, ", rows of %lld", (long long)s->row_elements);
        append_row_shape(buf, len, off, sg);
    }
    if (s->nparts > 1) mlc_append(buf, len, off, ", part %d of %d", s->part + 1, s->nparts);
    if (s->compression != MLC_COMPRESSION_NONE) /* the team's setting, whatever the dtype */
        mlc_append(buf, len, off, ", compression=%s", mlc_compression_name(s->compression));
    if (s->cancelled)
        mlc_append(buf, len, off, ", cancelled: the step that submitted it failed on this rank");
    if ((s->call_dtypes & ~(1 << s->dtype)) || (show_dtypes && s->call_dtypes)) {
        /* a call of several dtypes, or ranks whose calls say differently: name them all */
        mlc_append(buf, len, off, "; the call's dtypes:");
        for (int d = 0, k = 0; d < MLC_NUM_DTYPES; d++)
            if (s->call_dtypes & (1 << d)) mlc_append(buf, len, off, "%s %s", k++ ? "," : "", mlc_dtype_name(d));
    }
    mlc_append(buf, len, off, ")");
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
        if (!same_shape(&(mlc_signature){.c = x}, first)) return 0;
    }
    return 1;
}

/* "every rank submitted ..., but <what> differ between ranks 0, 2 and rank 1. <rule>":
 * where the description would read the same for every rank. */
static void alike_but_message(const table *t, char *buf, size_t len, size_t *off, alike_fn alike,
                              const char *what, const char *rule) {
    int groups = 0;
    for (int r = 0; r < t->n; r++) groups += leads(t, r, alike, NULL);
    mlc_append(buf, len, off, "every rank submitted ");
    append_signature(buf, len, off, at(t, 0), 1, 0);
    mlc_append(buf, len, off, ", but %s differ between ", what);
    for (int r = 0, k = 0; r < t->n; r++) {
        if (!leads(t, r, alike, NULL)) continue;
        mlc_append(buf, len, off, "%s", !k ? "" : ++k == groups ? " and " : ", ");
        if (!k) k = 1;
        append_ranks(buf, len, off, t, r, alike, NULL);
    }
    mlc_append(buf, len, off, ". %s", rule);
}

static void shape_message(const table *t, char *buf, size_t len, size_t *off) {
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
        show_dtypes |= at(t, r)->c.call_dtypes != first->c.call_dtypes && same_shape(&(mlc_signature){.c = x}, first);
    }
    for (int r = 0, k = 0; r < t->n; r++) {
        if (!leads(t, r, shape_alike, NULL)) continue;
        if (k++) mlc_append(buf, len, off, "; ");
        append_ranks(buf, len, off, t, r, shape_alike, NULL);
        mlc_append(buf, len, off, " submitted ");
        append_signature(buf, len, off, at(t, r), show_counts, show_dtypes);
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
            if (!leads(t, r, setting_alike, s)) continue;
            char value[64];
            s->show(s->get(&at(t, r)->c), value, sizeof value);
            if (g++) mlc_append(buf, len, off, "; ");
            append_ranks(buf, len, off, t, r, setting_alike, s);
            mlc_append(buf, len, off, ": %s", value);
        }
    }
    return k;
}

/* The team's schedule first (a pipelined rank also submits differently), then the
 * shapes, or else the plan's settings (they follow from the shapes). */
static int mismatch_message(const table *t, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
    int shapes_differ = 0;
    for (int r = 1; r < t->n; r++) shapes_differ |= !same_shape(at(t, 0), at(t, r));
    int named = append_settings(t, 1, buf, len, &off);
    if (named) mlc_append(buf, len, &off, ". Every rank must call config_team alike");
    if (shapes_differ) {
        if (named) mlc_append(buf, len, &off, "; and ");
        shape_message(t, buf, len, &off);
    } else if (!named) {
        append_settings(t, 0, buf, len, &off);
        mlc_append(buf, len, &off, ". Every rank must configure the team alike (config_team, "
                                   "ML_COMM_* variables) and call it alike (blocking or not, "
                                   "keyed group or not)");
    }
    return MLC_ERR_MISMATCH;
}

void mlc_describe_input(const mlc_sign_input *in, char *buf, size_t len) {
    int off = 0;
    if (in->is_group) off = snprintf(buf, len, "keyed group %lld: ", (long long)in->key);
    if (off < 0 || (size_t)off >= len) return;
    const char *s = in->ntensors == 1 ? "" : "s";
    if (in->kind == MLC_KIND_BROADCAST)
        snprintf(buf + off, len - off, "broadcast from rank %d of %d %s tensor%s, %lld elements",
                 in->root, in->ntensors, mlc_dtype_name(in->dtype), s, (long long)in->total);
    else if (in->kind == MLC_KIND_ALLREDUCE)
        snprintf(buf + off, len - off, "%s of %d %s tensor%s, %lld elements", op_name(in->op),
                 in->ntensors, mlc_dtype_name(in->dtype), s, (long long)in->total);
    else
        snprintf(buf + off, len - off, "%s of %s rows of %lld elements, %lld elements",
                 rows_kind_name(in->kind), mlc_dtype_name(in->dtype), (long long)in->row_elements,
                 (long long)in->total);
}

static int nonfinite_message(const table *t, int team_id, mlc_agreement *a) {
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

/* Why a front end refused a rank's call (mlc_team_refuse_call): tensor (-1: none said), reason. */
static void append_refused(char *buf, size_t len, size_t *off, long long tensor, long long reason) {
    const char *what = reason == MLC_REFUSED_NONE        ? "is None, not an array"
                       : reason == MLC_REFUSED_NOT_ARRAY ? "is not an array"
                       : reason == MLC_REFUSED_DTYPE     ? "has a dtype the call does not take"
                       : reason == MLC_REFUSED_TYPE      ? "is of a type the call does not take"
                       : reason == MLC_REFUSED_VALUE     ? "failed the call's check (its own error says why)"
                                                         : NULL;
    if (!what) mlc_append(buf, len, off, "its call raised before it reached the other ranks (its own error says why)");
    else if (tensor >= 0) mlc_append(buf, len, off, "tensor %lld of its list %s", tensor, what);
    else mlc_append(buf, len, off, "an argument %s", what);
}

/* "splits add up to 5 rows; the input has 6" and the like (agree.h, MLC_BAD_*). */
static void append_bad_args(char *buf, size_t len, size_t *off, int code, const int64_t detail[2]) {
    const long long x = (long long)detail[0], y = (long long)detail[1];
    switch (code) {
    case MLC_BAD_SPLITS_NOT_INTEGERS: mlc_append(buf, len, off, "splits are not a 1-D list of 64-bit integers"); break;
    case MLC_BAD_SPLITS_COUNT: mlc_append(buf, len, off, "%lld splits for %lld ranks (one per rank)", x, y); break;
    case MLC_BAD_SPLIT_NEGATIVE: mlc_append(buf, len, off, "splits[%lld] is %lld, negative", x, y); break;
    case MLC_BAD_SPLITS_SUM: mlc_append(buf, len, off, "splits add up to %lld rows, the input has %lld", x, y); break;
    case MLC_BAD_ROWS_UNEVEN:
        mlc_append(buf, len, off, "no splits, and its %lld rows do not divide by the %lld ranks", x, y);
        break;
    case MLC_BAD_SPLITS_OVERFLOW:
        mlc_append(buf, len, off, "splits add up to more than 2^63-1 rows (at splits[%lld] = %lld)", x, y);
        break;
    case MLC_BAD_SIZE_OVERFLOW:
        mlc_append(buf, len, off, "%lld rows of %lld elements are more than 2^63-1 bytes", x, y);
        break;
    case MLC_BAD_NO_BUFFER:
        mlc_append(buf, len, off, "no %s buffer for its %lld bytes", x ? "output" : "input", y);
        break;
    case MLC_BAD_DEVICE_HOST_ARRAY:
        mlc_append(buf, len, off, "tensor %lld is a host array among device arrays (one call takes one kind)", x);
        break;
    case MLC_BAD_DEVICE_LAYOUT: mlc_append(buf, len, off, "device tensor %lld is not contiguous", x); break;
    case MLC_BAD_DEVICE_MEMORY:
        mlc_append(buf, len, off, "tensor %lld is not in CUDA device memory%s", x, y ? " (CUDA host memory)" : "");
        break;
    case MLC_BAD_DEVICE_MIXED:
        mlc_append(buf, len, off, "tensor %lld is on CUDA device %lld, tensor 0 on another (one call, one device)",
                   x, y);
        break;
    case MLC_BAD_CUDA:
        mlc_append(buf, len, off, "CUDA error %lld while %s device buffers", x, y ? "copying" : "setting up for");
        break;
    case MLC_BAD_NO_CUDA: mlc_append(buf, len, off, "no CUDA driver could be loaded"); break;
    case MLC_BAD_NO_ROWS: mlc_append(buf, len, off, "a 0-d tensor, which has no rows (no first dimension)"); break;
    case MLC_BAD_ROOT: mlc_append(buf, len, off, "root %lld, which no rank has (ranks 0..%lld)", x, y - 1); break;
    case MLC_BAD_REFUSED: append_refused(buf, len, off, x, y); break;
    default: mlc_append(buf, len, off, "invalid arguments (code %d)", code);
    }
}

void mlc_describe_bad_args(int code, const int64_t detail[2], char *buf, size_t len) {
    size_t off = 0;
    if (len) buf[0] = '\0';
    append_bad_args(buf, len, &off, code, detail);
}

static int bad_alike(const table *t, int a, int b, const setting *s) {
    (void)s;
    const mlc_signature *x = at(t, a), *y = at(t, b);
    return x->c.bad_args == y->c.bad_args && x->bad_detail[0] == y->bad_detail[0] &&
           x->bad_detail[1] == y->bad_detail[1];
}

/* Every rank whose own check failed, grouped by what it found; the others' arguments
 * were valid. */
static int bad_args_message(const table *t, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "invalid %s arguments on team %d request %lld: ", rows_kind_name(at(t, 0)->c.kind),
               team_id, (long long)a->seq);
    int bad = 0, groups = 0;
    for (int r = 0; r < t->n; r++) {
        if (!at(t, r)->c.bad_args) continue;
        bad++;
        if (!leads(t, r, bad_alike, NULL)) continue;
        if (groups++) mlc_append(buf, len, &off, "; ");
        append_ranks(buf, len, &off, t, r, bad_alike, NULL);
        mlc_append(buf, len, &off, ": ");
        append_bad_args(buf, len, &off, at(t, r)->c.bad_args, at(t, r)->bad_detail);
    }
    if (bad < t->n) mlc_append(buf, len, &off, " (the other ranks' arguments are valid)");
    mlc_append(buf, len, &off, ". No rank moved any data");
    return MLC_ERR_ARG;
}

/* ---- the calls: ranks at different places in their programs ---- */

/* (step, call) of x against y's: < 0, 0, > 0. */
static int call_order(const compared *x, const compared *y) {
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->call_index < y->call_index ? -1 : x->call_index > y->call_index;
}

static int same_call(const table *t, int a, int b, const setting *s) {
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
        if (same_shape(at(t, 0), at(t, r))) continue;
        mlc_append(buf, len, off, "; and what they submitted differs: ");
        shape_message(t, buf, len, off);
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
static int calls_message(const table *t, int rank, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    for (int r = 1; r < t->n; r++) {
        if (calls_alike(t, 0, r, NULL)) continue;
        mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
        for (int q = 0, k = 0; q < t->n; q++) {
            if (!leads(t, q, calls_alike, NULL)) continue;
            if (k++) mlc_append(buf, len, &off, "; ");
            append_ranks(buf, len, &off, t, q, calls_alike, NULL);
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
            if (!leads(t, q, marks_alike, NULL)) continue;
            if (k++) mlc_append(buf, len, &off, "; ");
            append_ranks(buf, len, &off, t, q, marks_alike, NULL);
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
    append_ranks(buf, len, &off, t, furthest, same_call, NULL);
    int ahead = 0;
    for (int r = furthest; r < t->n; r++) ahead += same_call(t, furthest, r, NULL);
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
static int origins_differ(const table *t) {
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
static int origin_message(const table *t, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
    for (int r = 0, k = 0; r < t->n; r++) {
        if (!leads(t, r, same_origin, NULL)) continue;
        if (k++) mlc_append(buf, len, &off, "; ");
        append_ranks(buf, len, &off, t, r, same_origin, NULL);
        mlc_append(buf, len, &off, " called from thread '%s'", at(t, r)->origin_name);
    }
    mlc_append(buf, len, &off, ". One thread at a time drives a team, a thread of the same name on every rank "
                               "(another thread: another team)");
    return MLC_ERR_MISMATCH;
}

int mlc_judge(const char *slots, size_t slot_bytes, int n, int rank, int team_id, mlc_agreement *a) {
    const table t = {slots, slot_bytes, n};
    for (int r = 1; r < n; r++)
        if (!same_call(&t, 0, r, NULL)) return calls_message(&t, rank, team_id, a);
    if (origins_differ(&t)) return origin_message(&t, team_id, a);
    for (int r = 0; r < n; r++)
        if (at(&t, r)->c.bad_args) return bad_args_message(&t, team_id, a);
    /* Up to the origin, the last field, judged above. */
    for (int r = 1; r < n; r++)
        if (memcmp(&at(&t, 0)->c, &at(&t, r)->c, offsetof(compared, origin))) return mismatch_message(&t, team_id, a);
    for (int r = 0; r < n; r++)
        if (at(&t, r)->nonfinite_tensor >= 0) return nonfinite_message(&t, team_id, a);
    return MLC_OK;
}
