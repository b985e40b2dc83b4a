/* The algorithm table: adding an algorithm is one file and one row here (and an
 * id in ml_comm.h's enum mlc_algorithm). plan/plan.c is the one place that picks
 * a row for a request. */
#include <stddef.h>
#include <string.h>

#include "algo.h"

_Static_assert(MLC_AHEAD_TAG <= MLC_TP_TAG_UB, "every tag of the algorithms is one every MPI accepts");

static const mlc_algo table[] = {
    {MLC_ALG_RING, "ring", mlc_allreduce_ring, NULL},
    {MLC_ALG_RECURSIVE_DOUBLING, "recursive_doubling", mlc_allreduce_recursive_doubling, NULL},
    {MLC_ALG_RABENSEIFNER, "rabenseifner", mlc_allreduce_rabenseifner, NULL},
    {MLC_ALG_DIRECT, "direct", mlc_allreduce_direct, NULL},
    {MLC_ALG_ALLGATHERV_RING, "allgatherv_ring", NULL, mlc_allgatherv_ring},
    {MLC_ALG_REDUCE_SCATTERV_RING, "reduce_scatterv_ring", NULL, mlc_reduce_scatterv_ring},
    {MLC_ALG_ALLTOALLV_PAIRWISE, "alltoallv_pairwise", NULL, mlc_alltoallv_pairwise},
};

#define NROWS ((int)(sizeof table / sizeof table[0]))

const mlc_algo *mlc_algo_find(int id) {
    for (int i = 0; i < NROWS; i++)
        if (table[i].id == id) return &table[i];
    return NULL;
}

int mlc_algorithm_count(void) { return NROWS; }

const char *mlc_algorithm_name(int id) {
    const mlc_algo *a = mlc_algo_find(id);
    return a ? a->name : id == MLC_ALG_AUTO ? "auto" : "unknown";
}

int64_t mlc_rows_before(const int64_t *rows, int k) {
    int64_t sum = 0;
    for (int i = 0; i < k; i++) sum += rows[i];
    return sum;
}

void mlc_segment_copy_input(const mlc_segment *seg, int elem_size) {
    if (seg->input && seg->input != seg->data && seg->count > 0)
        memcpy(seg->data, seg->input, seg->count * elem_size);
}
