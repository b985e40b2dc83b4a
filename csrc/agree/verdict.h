/* Shared by the verdict's files (verdict.c judges, verdict_*.c write the messages): the
 * table of n ranks' signatures and the grouping of ranks that are alike by one rule. */
#ifndef MLC_VERDICT_H
#define MLC_VERDICT_H

#include <stddef.h>

#include "algos/algo.h"
#include "signature.h"

typedef struct table {
    const char *slots;
    size_t slot_bytes;
    int n;
} table;

static inline const mlc_signature *at(const table *t, int r) {
    return (const mlc_signature *)(t->slots + (size_t)r * t->slot_bytes);
}

/* One of the settings compared (verdict_shapes.c), for a rule that groups by its value. */
typedef struct setting setting;

/* Two ranks alike for the grouping: the same shape, or the same value of one setting. */
typedef int (*alike_fn)(const table *t, int a, int b, const setting *s);

/* verdict_ranks.c */
const char *mlc_op_name(int op);
const char *mlc_rows_kind_name(int kind);
void mlc_append_ranks(char *buf, size_t len, size_t *off, const table *t, int leader, alike_fn alike,
                      const setting *s);
int mlc_leads(const table *t, int r, alike_fn alike, const setting *s);
void mlc_append_signature(char *buf, size_t len, size_t *off, const mlc_signature *sg, int show_counts,
                          int show_dtypes);

/* verdict_shapes.c */
int mlc_same_shape(const mlc_signature *a, const mlc_signature *b);
void mlc_shape_message(const table *t, char *buf, size_t len, size_t *off);
int mlc_mismatch_message(const table *t, int team_id, mlc_agreement *a);
int mlc_nonfinite_message(const table *t, int team_id, mlc_agreement *a);

/* verdict_args.c */
int mlc_bad_args_message(const table *t, int team_id, mlc_agreement *a);

/* verdict_calls.c */
int mlc_same_call(const table *t, int a, int b, const setting *s);
int mlc_calls_message(const table *t, int rank, int team_id, mlc_agreement *a);
int mlc_origins_differ(const table *t);
int mlc_origin_message(const table *t, int team_id, mlc_agreement *a);

#endif
