/* Which MPI library the core is bound to: the file that holds the MPI symbols the
 * core calls. Python compares it with the library mpi4py loaded (ml_comm/mpi/library.py),
 * because two MPI libraries in one process (the core bound to one, mpi4py to another)
 * fail in strange ways or, worse, seem to work with every rank alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "team.h"

const char *mlc_mpi_library_path(char *buf, size_t len) {
    Dl_info info;
    /* The address the core's own call would jump to, so a library that interposes
     * MPI_Get_library_version (LD_PRELOAD, a profiler) is the one named. */
    int (*symbol)(char *, int *) = MPI_Get_library_version;
    if (dladdr((void *)symbol, &info) && info.dli_fname && info.dli_fname[0])
        snprintf(buf, len, "%s", info.dli_fname);
    else
        snprintf(buf, len, "%s", "");
    return buf;
}
