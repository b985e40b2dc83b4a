#!/usr/bin/env bash
# The GPU checks of device arrays, in one go, on a machine with an NVIDIA GPU, Python with
# numpy, torch and cupy, and gcc: builds ml_comm in place, runs tests/mpi/test_device_arrays.py
# with PyTorch and with CuPy arrays at 1 and 2 ranks (both ranks on GPU 0), then
# benchmarks/device_gradients.py at 2 ranks. Logs and the benchmark's JSON go to $OUT
# (default /tmp/gpu_check). ARRAYS="torch" or "fake" picks the test runs' arrays;
# SKIP_BENCHMARK=1 leaves out the benchmark.
#
# Where the machine has no MPI, cffi or pytest-mpi, put their wheels in .whl/ (mpich, mpi4py,
# cffi, pycparser, ml_dtypes, pytest-mpi and a setuptools >= 77, for its Python): they are
# installed into /tmp/site first.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    # --target leaves out the MPI wheel's lib/ (libmpi): --prefix puts it there.
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed --prefix /tmp/site .whl/mpich-*.whl || exit 1
    export PYTHONPATH=$PWD:/tmp/site PATH=/tmp/site/bin:$PATH LD_LIBRARY_PATH=/tmp/site/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export ML_COMM_MPICC=/tmp/site/bin/mpicc
fi
{ nvidia-smi -L; nproc; grep -m1 "model name" /proc/cpuinfo; $PY --version; } 2>&1 | tee "$OUT/machine.txt"
$PY setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
status=0
for arrays in ${ARRAYS:-torch cupy}; do
    for n in 1 2; do
        echo "== tests/mpi/test_device_arrays.py, $arrays arrays, $n rank(s)"
        ML_COMM_TEST_DEVICE_ARRAYS=$arrays timeout 300 mpiexec -n $n $PY -m pytest -q --with-mpi \
            -p no:cacheprovider tests/mpi/test_device_arrays.py -rs > "$OUT/test_${arrays}_$n.log" 2>&1
        rc=$?
        grep -E "passed|failed|SKIPPED|Error" "$OUT/test_${arrays}_$n.log" | sort | uniq -c | head -20
        [ $rc -eq 0 ] || { status=1; tail -40 "$OUT/test_${arrays}_$n.log"; }
    done
done
echo "== docs/gpu.md's example, 2 ranks"
$PY -c "import re, sys; print(re.search(r'\x60\x60\x60python\n(.*?)\x60\x60\x60', open('docs/gpu.md').read(), re.S).group(1))" \
    > "$OUT/gpu_example.py" && timeout 120 mpiexec -n 2 $PY "$OUT/gpu_example.py" && echo "example: OK" || status=1
[ -n "${SKIP_BENCHMARK:-}" ] && exit $status
# RUNS=3: the benchmark that many times (device_gradients_<i>.json).
for run in $(seq 1 "${RUNS:-1}"); do
    echo "== benchmarks/device_gradients.py, 2 ranks, run $run"
    timeout 400 mpiexec -n 2 $PY benchmarks/device_gradients.py --json "$OUT/device_gradients_$run.json" \
        ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log" || status=1
done
# SWEEP="ML_COMM_CUDA_PIECE_BYTES=4194304 ML_COMM_CPY_PER_CUDA_STREAM=1": the large sizes
# again under each setting, one at a time.
for setting in ${SWEEP:-}; do
    echo "== $setting"
    env "$setting" timeout 200 mpiexec -n 2 $PY benchmarks/device_gradients.py --sizes-mib 64,256 \
        --json "$OUT/device_gradients_$(echo "${setting#ML_COMM_}" | tr 'A-Z=' 'a-z_').json" 2>&1 | tee -a "$OUT/bench.log"
done
exit $status
