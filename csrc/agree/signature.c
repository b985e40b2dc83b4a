/* Signatures: what one rank submitted for one request, and how it is to be carried
 * out (the fields and what is compared: signature.h), made from the team layer's
 * mlc_sign_input, and their digest; verdict.c judges n of them. */
#include <string.h>

#include "signature.h"

_Static_assert(sizeof(compared) == 12 * 4 + 6 * 8 + 6 * 4 + 4 * 8 + 3 * 8, "compared has no padding");
_Static_assert(sizeof(compared) % 8 == 0, "the digest reads compared in 8-byte words");
_Static_assert(sizeof(struct mlc_signature) % 8 == 0, "signatures stay 8-byte aligned");
_Static_assert(sizeof(struct mlc_signature) == MLC_SIGNATURE_BYTES, "the size ml_comm_internal.h says");

size_t mlc_signature_bytes(void) { return sizeof(mlc_signature); }

static uint64_t fnv(uint64_t h, const void *bytes, size_t len) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

void mlc_sign(const mlc_sign_input *in, int stop, mlc_signature *s) {
    memset(s, 0, sizeof *s);
    compared *c = &s->c;
    c->kind = in->kind;
    c->dtype = in->dtype;
    c->op = in->kind == MLC_KIND_ALLREDUCE || in->kind == MLC_KIND_REDUCESCATTER ? in->op : 0;
    c->root = in->kind == MLC_KIND_BROADCAST ? in->root : 0;
    c->ntensors = in->ntensors;
    c->part = in->part;
    c->nparts = in->nparts > 0 ? in->nparts : 1;
    c->call_dtypes = in->call_dtypes;
    c->compression = in->compression;
    c->sizes_vary = in->sizes_vary != 0;
    c->team_algorithm = in->team_algorithm;
    c->algorithm = in->algorithm;
    c->on_caller = in->on_caller;
    c->lanes = in->lanes;
    c->is_group = in->is_group != 0;
    c->direct = in->direct != 0;
    c->ksteps = in->ksteps;
    c->max_steps = in->max_steps;
    c->seg_elems = in->seg_elems;
    c->cancelled = in->cancelled;
    c->step = in->call.step;
    c->call_index = in->call.index;
    c->origin = in->call.origin;
    memcpy(s->origin_name, in->call.origin_name, sizeof s->origin_name);
    s->origin_name[sizeof s->origin_name - 1] = '\0';
    uint64_t h = 1469598103934665603ull, shapes = h, labels = h;
    int labelled = 0;
    for (int i = 0; i < in->ntensors; i++) {
        if (i < MLC_SIG_SHOWN_COUNTS) s->counts[i] = in->tensors[i].count;
        h = fnv(h, &in->tensors[i].count, sizeof in->tensors[i].count);
        shapes = fnv(shapes, &in->tensors[i].shape, sizeof in->tensors[i].shape);
        labels = fnv(labels, &in->tensors[i].label, sizeof in->tensors[i].label);
        labelled |= in->tensors[i].label != 0;
    }
    c->labels_hash = labelled ? labels : 0;
    c->row_elements = in->row_elements; /* 0 but for collectives of rows */
    c->row_ndim = in->row_shape ? in->row_ndim : -1;
    c->row_shape_hash = 0;
    for (int d = 0; in->row_shape && d < in->row_ndim; d++) {
        if (d < MLC_SIG_SHOWN_DIMS) s->row_dims[d] = in->row_shape[d];
        c->row_shape_hash = fnv(c->row_shape_hash ^ 1469598103934665603ull, &in->row_shape[d],
                                sizeof in->row_shape[d]);
    }
    c->bad_args = in->bad_args;
    s->bad_detail[0] = in->bad_detail[0];
    s->bad_detail[1] = in->bad_detail[1];
    if (c->sizes_vary) { /* each rank's own sizes; only the rows' length must agree */
        c->layout_hash = c->shapes_hash = 0;
        c->total = 0;
        c->seg_elems = 0; /* planned from each rank's own total */
    } else {
        c->total = in->total;
        c->layout_hash = h;
        c->shapes_hash = shapes;
    }
    s->nonfinite_tensor = in->nonfinite_tensor;
    s->nonfinite_count = in->nonfinite_count;
    s->stop = stop;
    s->ahead = (int32_t)in->ahead_bytes;
}

/* Eight bytes a step (the digest is taken for every request): each word xored in
 * and multiplied by FNV's prime, then the high bits folded down. */
uint64_t mlc_signature_digest(const mlc_signature *s) {
    uint64_t h = 1469598103934665603ull, w;
    for (size_t i = 0; i < sizeof s->c; i += 8) {
        memcpy(&w, (const char *)&s->c + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    return h ^ (h >> 29);
}

int mlc_signature_stop(const mlc_signature *s) { return s->stop; }

void mlc_signature_nonfinite(const mlc_signature *s, int *tensor, int *count) {
    *tensor = s->nonfinite_tensor;
    *count = s->nonfinite_count;
}

int mlc_signature_bad_args(const mlc_signature *s) { return s->c.bad_args; }

int64_t mlc_signature_ahead(const mlc_signature *s) { return s->ahead; }
