"""MPI as the user launched it: mpi4py's start (init.py), the library the core was built
against (library.py), the launch check (launch.py) and the `--check` report
(check_report.py). Above core/."""
