/* Ranks whose own check of their arguments failed, or whose front end refused the call:
 * what each one found, grouped by rank. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "verdict.h"

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
int mlc_bad_args_message(const table *t, int team_id, mlc_agreement *a) {
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "invalid %s arguments on team %d request %lld: ", mlc_rows_kind_name(at(t, 0)->c.kind),
               team_id, (long long)a->seq);
    int bad = 0, groups = 0;
    for (int r = 0; r < t->n; r++) {
        if (!at(t, r)->c.bad_args) continue;
        bad++;
        if (!mlc_leads(t, r, bad_alike, NULL)) continue;
        if (groups++) mlc_append(buf, len, &off, "; ");
        mlc_append_ranks(buf, len, &off, t, r, bad_alike, NULL);
        mlc_append(buf, len, &off, ": ");
        append_bad_args(buf, len, &off, at(t, r)->c.bad_args, at(t, r)->bad_detail);
    }
    if (bad < t->n) mlc_append(buf, len, &off, " (the other ranks' arguments are valid)");
    mlc_append(buf, len, &off, ". No rank moved any data");
    return MLC_ERR_ARG;
}
