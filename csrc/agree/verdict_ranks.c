/* The words every verdict message is made of: groups of ranks ("ranks 0, 2-4") that are
 * alike by a rule, and what a rank submitted ("2 tensors, 10 float32 elements (sum)"). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "verdict.h"

/* "sum", "average", "min", "max", "product". */
const char *mlc_op_name(int op) {
    static const char *const names[] = {"sum", "average", "min", "max", "product"};
    return op >= 0 && op < MLC_NUM_OPS ? names[op] : "unknown op";
}

const char *mlc_rows_kind_name(int kind) {
    return kind == MLC_KIND_ALLGATHER       ? "allgather"
           : kind == MLC_KIND_REDUCESCATTER ? "reducescatter"
           : kind == MLC_KIND_ALLTOALL      ? "alltoall"
           : kind == MLC_KIND_ALLREDUCE     ? "allreduce"
           : kind == MLC_KIND_BROADCAST     ? "broadcast"
                                            : "request kind";
}

/* "rank 1" or "ranks 0, 2-4": the ranks alike to the leader. */
void mlc_append_ranks(char *buf, size_t len, size_t *off, const table *t, int leader, alike_fn alike,
                      const setting *s) {
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
int mlc_leads(const table *t, int r, alike_fn alike, const setting *s) {
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

void mlc_append_signature(char *buf, size_t len, size_t *off, const mlc_signature *sg, int show_counts,
                          int show_dtypes) {
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
    else if (s->kind == MLC_KIND_ALLREDUCE) mlc_append(buf, len, off, " (%s", mlc_op_name(s->op));
    else if (s->kind == MLC_KIND_REDUCESCATTER) mlc_append(buf, len, off, " (reducescatter, %s", mlc_op_name(s->op));
    else mlc_append(buf, len, off, " (%s", mlc_rows_kind_name(s->kind));
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

void mlc_describe_input(const mlc_sign_input *in, char *buf, size_t len) {
    int off = 0;
    if (in->is_group) off = snprintf(buf, len, "keyed group %lld: ", (long long)in->key);
    if (off < 0 || (size_t)off >= len) return;
    const char *s = in->ntensors == 1 ? "" : "s";
    if (in->kind == MLC_KIND_BROADCAST)
        snprintf(buf + off, len - off, "broadcast from rank %d of %d %s tensor%s, %lld elements",
                 in->root, in->ntensors, mlc_dtype_name(in->dtype), s, (long long)in->total);
    else if (in->kind == MLC_KIND_ALLREDUCE)
        snprintf(buf + off, len - off, "%s of %d %s tensor%s, %lld elements", mlc_op_name(in->op),
                 in->ntensors, mlc_dtype_name(in->dtype), s, (long long)in->total);
    else
        snprintf(buf + off, len - off, "%s of %s rows of %lld elements, %lld elements",
                 mlc_rows_kind_name(in->kind), mlc_dtype_name(in->dtype), (long long)in->row_elements,
                 (long long)in->total);
}
