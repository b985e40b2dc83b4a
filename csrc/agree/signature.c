/* Signatures: what one rank submitted for one request, in 104 bytes, and the
 * verdict on n of them with the message that names each rank's submission.
 * Compared: kind, dtype, op (allreduce), root (broadcast), ntensors, total,
 * layout_hash, part, nparts, call_dtypes, compression (the team's 16-bit wire
 * setting, whatever the request's dtype: ranks that differ would exchange blocks
 * of different sizes on the ring), aborted (how many keyed groups the rank
 * cancelled because its step failed: a rank whose step failed alone is named). The first counts are kept for
 * messages; the stop flag rides along (exchange.c). Sent as bytes: the ranks of
 * one job share one architecture. */
#include <stdio.h>
#include <string.h>

#include "agree.h"

#define MLC_SIG_SHOWN_COUNTS 4

struct mlc_signature {
    int32_t kind, dtype, op, root;
    int32_t ntensors, part, nparts;
    int32_t nonfinite_tensor; /* first tensor holding NaN/Inf; -1: none (or unchecked) */
    int32_t nonfinite_count;  /* how many tensors hold NaN/Inf */
    int32_t direct;           /* the input (total elements) follows */
    int32_t call_dtypes;      /* bit d: the caller's call has a part of dtype d */
    int32_t aborted;          /* keyed groups this rank cancelled so far */
    int16_t stop;             /* this rank asked to stop (mlc_agree_request_stop) */
    int16_t compression;      /* the team's MLC_COMPRESSION_* */
    int64_t total;
    uint64_t layout_hash;                 /* FNV-1a over every tensor's count */
    int64_t counts[MLC_SIG_SHOWN_COUNTS]; /* the first tensors' counts */
};

_Static_assert(sizeof(struct mlc_signature) == 104, "exchange.c gives the signature's size");

size_t mlc_signature_bytes(void) { return sizeof(mlc_signature); }

void mlc_sign(const mlc_sign_input *in, int stop, mlc_signature *s) {
    memset(s, 0, sizeof *s);
    s->kind = in->kind;
    s->dtype = in->dtype;
    s->op = in->kind == MLC_KIND_ALLREDUCE ? in->op : 0;
    s->root = in->kind == MLC_KIND_BROADCAST ? in->root : 0;
    s->ntensors = in->ntensors;
    s->part = in->part;
    s->nparts = in->nparts > 0 ? in->nparts : 1;
    s->call_dtypes = in->call_dtypes;
    s->aborted = in->aborted;
    s->stop = (int16_t)stop;
    s->compression = (int16_t)in->compression;
    s->total = in->total;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < in->ntensors; i++) {
        uint64_t c = (uint64_t)in->tensors[i].count;
        for (int b = 0; b < 8; b++, c >>= 8) h = (h ^ (c & 0xff)) * 1099511628211ull;
        if (i < MLC_SIG_SHOWN_COUNTS) s->counts[i] = in->tensors[i].count;
    }
    s->layout_hash = h;
    s->nonfinite_tensor = in->nonfinite_tensor;
    s->nonfinite_count = in->nonfinite_count;
    s->direct = in->direct;
    if (s->direct)
        mlc_gather_range(in->tensors, in->starts, in->ntensors, in->dtype, 0, in->total, (char *)(s + 1));
}

static const mlc_signature *sig(const char *slots, size_t slot_bytes, int r) {
    return (const mlc_signature *)(slots + (size_t)r * slot_bytes);
}

static int same(const mlc_signature *a, const mlc_signature *b) {
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root &&
           a->ntensors == b->ntensors && a->total == b->total && a->layout_hash == b->layout_hash &&
           a->part == b->part && a->nparts == b->nparts && a->call_dtypes == b->call_dtypes &&
           a->compression == b->compression && a->aborted == b->aborted;
}

typedef struct table {
    const char *slots;
    size_t slot_bytes;
    int n;
} table;

static const mlc_signature *at(const table *t, int r) { return sig(t->slots, t->slot_bytes, r); }

/* "rank 1" or "ranks 0, 2-4": the ranks whose signature equals the leader's. */
static void append_ranks(char *buf, size_t len, size_t *off, const table *t, int leader) {
    const mlc_signature *l = at(t, leader);
    int count = 0;
    for (int r = leader; r < t->n; r++) count += same(l, at(t, r));
    mlc_append(buf, len, off, "%s ", count == 1 ? "rank" : "ranks");
    int first = 1;
    for (int r = leader; r < t->n;) {
        if (!same(l, at(t, r))) {
            r++;
            continue;
        }
        int end = r;
        while (end + 1 < t->n && same(l, at(t, end + 1))) end++;
        if (end == r) mlc_append(buf, len, off, "%s%d", first ? "" : ", ", r);
        else mlc_append(buf, len, off, "%s%d-%d", first ? "" : ", ", r, end);
        first = 0;
        r = end + 1;
    }
}

static void append_signature(char *buf, size_t len, size_t *off, const mlc_signature *s,
                             int show_counts) {
    mlc_append(buf, len, off, "%d tensor%s, %lld %s elements", s->ntensors, s->ntensors == 1 ? "" : "s",
               (long long)s->total, mlc_dtype_name(s->dtype));
    if (show_counts && s->ntensors > 0) {
        mlc_append(buf, len, off, " of sizes");
        for (int i = 0; i < s->ntensors && i < MLC_SIG_SHOWN_COUNTS; i++)
            mlc_append(buf, len, off, "%s %lld", i ? "," : "", (long long)s->counts[i]);
        if (s->ntensors > MLC_SIG_SHOWN_COUNTS) mlc_append(buf, len, off, ", ...");
    }
    if (s->kind == MLC_KIND_BROADCAST) mlc_append(buf, len, off, " (broadcast from rank %d", s->root);
    else mlc_append(buf, len, off, " (%s", s->op == MLC_OP_SUM ? "sum" : "average");
    if (s->nparts > 1) mlc_append(buf, len, off, ", part %d of %d", s->part + 1, s->nparts);
    if (s->compression != MLC_COMPRESSION_NONE) /* the team's setting, whatever the dtype */
        mlc_append(buf, len, off, ", compression=%s", mlc_compression_name(s->compression));
    if (s->aborted) /* the rank's own count: the ranks with the higher one had a step fail */
        mlc_append(buf, len, off, ", after %d step%s that failed on this rank cancelled its "
                   "gradient group", s->aborted, s->aborted == 1 ? "" : "s");
    if (s->call_dtypes & ~(1 << s->dtype)) { /* a call of several dtypes: name them all */
        mlc_append(buf, len, off, "; the call's dtypes:");
        for (int d = 0, k = 0; d < MLC_NUM_DTYPES; d++)
            if (s->call_dtypes & (1 << d)) mlc_append(buf, len, off, "%s %s", k++ ? "," : "", mlc_dtype_name(d));
    }
    mlc_append(buf, len, off, ")");
}

static int mismatch_message(const table *t, int team_id, mlc_agreement *a) {
    const mlc_signature *first = at(t, 0);
    int show_counts = 0;
    for (int r = 1; r < t->n; r++)
        if (at(t, r)->ntensors == first->ntensors && at(t, r)->total == first->total &&
            at(t, r)->layout_hash != first->layout_hash)
            show_counts = 1;
    char *buf = a->message;
    size_t off = 0, len = MLC_MSG_LEN;
    buf[0] = '\0';
    mlc_append(buf, len, &off, "ranks disagree on team %d request %lld: ", team_id, (long long)a->seq);
    for (int r = 0; r < t->n; r++) {
        int leader = 1;
        for (int q = 0; q < r && leader; q++) leader = !same(at(t, q), at(t, r));
        if (!leader) continue;
        if (r > 0) mlc_append(buf, len, &off, "; ");
        append_ranks(buf, len, &off, t, r);
        mlc_append(buf, len, &off, " submitted ");
        append_signature(buf, len, &off, at(t, r), show_counts);
    }
    mlc_append(buf, len, &off, ". Every rank must make the same calls, with the same tensors, in the same order");
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
    else
        snprintf(buf + off, len - off, "%s of %d %s tensor%s, %lld elements",
                 in->op == MLC_OP_SUM ? "sum" : "average", in->ntensors, mlc_dtype_name(in->dtype),
                 s, (long long)in->total);
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

int mlc_judge(const char *slots, size_t slot_bytes, int n, int team_id, mlc_agreement *a, int *direct) {
    const table t = {slots, slot_bytes, n};
    *direct = 1;
    for (int r = 1; r < n; r++)
        if (!same(at(&t, 0), at(&t, r))) return mismatch_message(&t, team_id, a);
    int ndirect = 0;
    for (int r = 0; r < n; r++) {
        if (at(&t, r)->nonfinite_tensor >= 0) return nonfinite_message(&t, team_id, a);
        ndirect += at(&t, r)->direct != 0;
    }
    *direct = ndirect == n;
    if (ndirect == 0 || ndirect == n) return MLC_OK;
    /* Some ranks sent their input along and some did not: their settings differ. */
    snprintf(a->message, MLC_MSG_LEN,
             "ranks disagree on team %d request %lld: %d of %d ranks send allreduces of this size "
             "inside the agreement check and the others do not; every rank must use the same "
             "ML_COMM_DIRECT_BYTES and algorithm",
             team_id, (long long)a->seq, ndirect, n);
    return MLC_ERR_MISMATCH;
}

int mlc_any_stop(const char *slots, size_t slot_bytes, int n) {
    for (int r = 0; r < n; r++)
        if (sig(slots, slot_bytes, r)->stop) return 1;
    return 0;
}
