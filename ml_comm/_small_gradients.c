/* gradients([grad]) for one small NumPy array, in one C call.
 *
 * At 8 bytes the core's whole allreduce takes about 5 us, and the Python around it
 * (cffi's from_buffer on the input and on a fresh output, np.empty, the checks) took as
 * long again: numpy builds the buffer-protocol description of every new array. Here the
 * array's fields are read through NumPy's C API and the output is allocated by it, so the
 * call costs little more than the core's own.
 *
 * This is binding glue, not the core: it knows NumPy and Python; the core it calls
 * (mlc_team_allreduce_into, declared in ml_comm.h) knows neither, and is reached through
 * the address that cffi gives for it, so this module links against nothing of ml_comm's.
 *
 * bind(...) -> a capsule holding the team, the error buffer and the dtype table;
 * average(binding, grad) -> the average as a new array; None when grad is not a plain,
 * aligned, C-contiguous, native-order ndarray of a dtype in the table and below the size
 * limit (the caller then takes its general path); the core's status (an int) when the
 * core failed, its text in the error buffer. The Python caller owns the capsule and drops
 * it before the team or the error buffer go away.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>

#include "ml_comm.h"

typedef __typeof__(&mlc_team_allreduce_into) allreduce_into_fn;

enum { MAX_DTYPES = 32 };
static const char CAPSULE_NAME[] = "ml_comm._small_gradients.binding";

typedef struct {
    allreduce_into_fn allreduce_into;
    mlc_team *team;
    char *err;
    size_t err_len;
    Py_ssize_t below_bytes; /* arrays of this size and more take the caller's general path */
    int ndtypes;
    int type_nums[MAX_DTYPES]; /* NumPy's type number -> the core's dtype code */
    int codes[MAX_DTYPES];
} binding;

static void free_binding(PyObject *capsule) {
    PyMem_Free(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
}

static int read_dtype_table(PyObject *pairs, binding *b) {
    PyObject *seq = PySequence_Fast(pairs, "dtypes must be a list of (type number, code) pairs");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_DTYPES) {
        PyErr_Format(PyExc_ValueError, "at most %d dtypes, got %zd", MAX_DTYPES, n);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int num, code;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ii", &num, &code)) {
            Py_DECREF(seq);
            return -1;
        }
        b->type_nums[i] = num;
        b->codes[i] = code;
    }
    b->ndtypes = (int)n;
    Py_DECREF(seq);
    return 0;
}

static PyObject *bind(PyObject *module, PyObject *args) {
    unsigned long long allreduce_into, team, err;
    Py_ssize_t err_len, below_bytes;
    PyObject *dtypes;
    if (!PyArg_ParseTuple(args, "KKKnnO:bind", &allreduce_into, &team, &err, &err_len,
                          &below_bytes, &dtypes))
        return NULL;
    if (!allreduce_into || !team || !err || err_len <= 0) {
        PyErr_SetString(PyExc_ValueError, "bind needs the core's function, a team and an error buffer");
        return NULL;
    }
    binding *b = PyMem_Calloc(1, sizeof *b);
    if (!b) return PyErr_NoMemory();
    b->allreduce_into = (allreduce_into_fn)(uintptr_t)allreduce_into;
    b->team = (mlc_team *)(uintptr_t)team;
    b->err = (char *)(uintptr_t)err;
    b->err_len = (size_t)err_len;
    b->below_bytes = below_bytes;
    if (read_dtype_table(dtypes, b)) {
        PyMem_Free(b);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(b, CAPSULE_NAME, free_binding);
    if (!capsule) PyMem_Free(b);
    return capsule;
}

static int core_code(const binding *b, const PyArrayObject *grad) {
    const int num = PyArray_TYPE(grad);
    for (int i = 0; i < b->ndtypes; i++)
        if (b->type_nums[i] == num) return b->codes[i];
    return -1;
}

static PyObject *average(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "average(binding, grad)");
        return NULL;
    }
    const binding *b = PyCapsule_GetPointer(args[0], CAPSULE_NAME);
    if (!b) return NULL;
    if (!PyArray_CheckExact(args[1])) Py_RETURN_NONE;
    PyArrayObject *grad = (PyArrayObject *)args[1];
    /* Byte-swapped arrays share the native type number; the general path refuses them too. */
    if (!PyArray_IS_C_CONTIGUOUS(grad) || !PyArray_ISALIGNED(grad) || PyArray_ISBYTESWAPPED(grad) ||
        PyArray_NBYTES(grad) >= b->below_bytes)
        Py_RETURN_NONE;
    const int code = core_code(b, grad);
    if (code < 0) Py_RETURN_NONE;
    PyObject *result = PyArray_NewLikeArray(grad, NPY_CORDER, NULL, 0);
    if (!result) return NULL;
    const void *source = PyArray_DATA(grad);
    void *data = PyArray_DATA((PyArrayObject *)result);
    const int64_t count = PyArray_SIZE(grad);
    int rc;
    /* The call waits for the other ranks: other Python threads run meanwhile. The caller's
     * list keeps grad alive; result is ours. */
    Py_BEGIN_ALLOW_THREADS
    rc = b->allreduce_into(b->team, source, data, count, code, MLC_OP_AVERAGE, 1 << code, b->err, b->err_len);
    Py_END_ALLOW_THREADS
    if (rc) {
        Py_DECREF(result);
        return PyLong_FromLong(rc);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_VARARGS,
     "bind(allreduce_into, team, err, err_len, below_bytes, dtypes) -> binding"},
    {"average", (PyCFunction)(void (*)(void))average, METH_FASTCALL,
     "average(binding, grad) -> new array | None (not handled here) | int (core status)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_small_gradients", "gradients([grad]) for one small array, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__small_gradients(void) {
    import_array(); /* returns NULL with an ImportError set when NumPy's C API is missing */
    return PyModule_Create(&module_def);
}
