/* MPI_Allreduce at each size given, for SMPI (smpicc; run by tools/project.py with
 * --cfg=smpi/coll-selector:mpich): MPICH's own algorithm selection on the model's
 * platform, float32 sums. Buffers come from SMPI_SHARED_MALLOC: every rank's
 * buffer is the same memory, so thousands of simulated ranks fit on one machine
 * (the sums are wrong, their timing is not). Rank 0 prints one JSON line per size:
 * the slowest rank's time of the second call (the first warms nothing here, but
 * mirrors the benchmark's warm-up). */
#include <mpi.h>
#include <smpi/smpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 1; i < argc; i++) {
        long long bytes = atoll(argv[i]);
        int count = (int)(bytes / 4);
        float *in = SMPI_SHARED_MALLOC(bytes > 4 ? bytes : 4);
        float *out = SMPI_SHARED_MALLOC(bytes > 4 ? bytes : 4);
        double t = 0;
        for (int it = 0; it < 2; it++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            double mine = MPI_Wtime() - t0;
            MPI_Reduce(&mine, &t, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        }
        if (rank == 0) printf("{\"bytes\": %lld, \"time_s\": %.9g}\n", bytes, t);
        SMPI_SHARED_FREE(in);
        SMPI_SHARED_FREE(out);
    }
    MPI_Finalize();
    return 0;
}
