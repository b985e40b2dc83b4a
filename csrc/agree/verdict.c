/* The verdict on n ranks' signatures of one request (mlc_judge): the order in which it
 * looks (the calls, their threads, each rank's own argument check, the request, NaN/Inf)
 * and the first difference found decides the message (verdict_*.c write them). */
#include <stddef.h>
#include <string.h>

#include "verdict.h"

int mlc_judge(const char *slots, size_t slot_bytes, int n, int rank, int team_id, mlc_agreement *a) {
    const table t = {slots, slot_bytes, n};
    for (int r = 1; r < n; r++)
        if (!mlc_same_call(&t, 0, r, NULL)) return mlc_calls_message(&t, rank, team_id, a);
    if (mlc_origins_differ(&t)) return mlc_origin_message(&t, team_id, a);
    for (int r = 0; r < n; r++)
        if (at(&t, r)->c.bad_args) return mlc_bad_args_message(&t, team_id, a);
    /* Up to the origin, the last field, judged above. */
    for (int r = 1; r < n; r++)
        if (memcmp(&at(&t, 0)->c, &at(&t, r)->c, offsetof(compared, origin)))
            return mlc_mismatch_message(&t, team_id, a);
    for (int r = 0; r < n; r++)
        if (at(&t, r)->nonfinite_tensor >= 0) return mlc_nonfinite_message(&t, team_id, a);
    return MLC_OK;
}
