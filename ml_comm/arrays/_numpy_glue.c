/* NumPy glue in C: the memory of gradients' results; gradients([grad]) and the in-place
 * reductions in one call each.
 *
 * Why C: in a loop that alternates with MPI's, each Python statement runs from a cold
 * cache. At 8 bytes the core's allreduce takes about 5 us and the Python around it
 * (cffi's from_buffer on the input and on a fresh output, np.empty, the checks) took as
 * long again; at 1 MiB the Python pool's bookkeeping (a ctypes owner and a weakref
 * finalizer per call) took 65 us, a fifth of MPI's whole allreduce. Here arrays are
 * read and made through NumPy's C API.
 *
 * This is binding glue, not the core: it knows NumPy and Python; the core function it
 * calls (mlc_team_allreduce_into, mlc_shape_digest, declared in ml_comm.h) know neither,
 * and are reached through the addresses that cffi gives for them, so this module links
 * against nothing of ml_comm's.
 *
 * pool(keep) -> a pool of touched memory blocks. take(pool, nbytes) -> a writable uint8
 *   array over a block of at least nbytes (a free block of up to twice the size, the
 *   smallest that fits, the oldest of those; else a new one, written once so that its
 *   pages fault now and never again). The block goes back to the pool when the array and
 *   every view of it are gone; at most `keep` free blocks are kept (the oldest are freed).
 *   free_blocks(pool) -> how many are free.
 * bind(allreduce_into, begin_call, end_call, shape_digest, team, pool, pool_from_bytes,
 *   dtypes) -> a binding of one team. gradients(bindings, grads, team,
 *   thread_state) -> mc.gradients([grad]) whole: [the average over the ranks] as a new
 *   array (from the pool from pool_from_bytes, else fresh), made inside one call of the
 *   caller's identity (the tuple (step, origin, name: bytes) of its thread, read from
 *   thread_state, core/calls.py; begun and ended here, holding the GIL, as two cffi calls
 *   would release and take it again); None when the caller's Python path must take it
 *   (grads not a list of one plain, aligned, C-contiguous, native-order ndarray of a dtype
 *   in the table; a team without a binding in bindings; a renamed thread), no call begun;
 *   (status, text) when the core failed, the text the calling thread's own.
 *   reduce_in_place(bindings, array, team, op, thread_state) -> the array, reduced in
 *   place with op (mc.average, mc.allreduce_sum) inside one call of the caller's
 *   identity, as gradients'; None also when the array is read-only; (status, text) on
 *   failure. publish(thread_state, current): the calling thread's thread_state.current,
 *   handed over by core/calls.py whenever it changes it (Calls.publish_with) and kept in
 *   the thread's own dict, for the two calls above. The Python caller drops the binding
 *   before the team goes away. Every function runs holding the GIL,
 *   which guards the pools, except the core's call itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ml_comm.h"

typedef __typeof__(&mlc_team_allreduce_into) allreduce_into_fn;
typedef __typeof__(&mlc_team_begin_call) begin_call_fn;
typedef __typeof__(&mlc_shape_digest) shape_digest_fn;
typedef __typeof__(&mlc_team_end_call) end_call_fn;

enum { MAX_KEEP = 64, MAX_DTYPES = 32, BLOCK_ALIGN = 4096 };
static const char POOL_NAME[] = "ml_comm.arrays._numpy_glue.pool";
static const char BINDING_NAME[] = "ml_comm.arrays._numpy_glue.binding";

/* ---- the pool ---------------------------------------------------------------------- */

typedef struct {
    char *data;
    size_t bytes;
} block;

typedef struct {
    Py_ssize_t refs; /* its Python handle, each binding and each block out */
    int keep, nfree;
    block free_blocks[MAX_KEEP]; /* oldest first */
} results_pool;

static void pool_release(results_pool *p) {
    if (--p->refs > 0) return;
    for (int i = 0; i < p->nfree; i++) free(p->free_blocks[i].data);
    PyMem_Free(p);
}

static void pool_give_back(results_pool *p, block b) {
    if (p->keep == 0) {
        free(b.data);
        return;
    }
    if (p->nfree == p->keep) { /* drop the oldest */
        free(p->free_blocks[0].data);
        memmove(p->free_blocks, p->free_blocks + 1, (size_t)(p->nfree - 1) * sizeof(block));
        p->nfree--;
    }
    p->free_blocks[p->nfree++] = b;
}

static int pool_take_block(results_pool *p, size_t nbytes, block *out) {
    int best = -1;
    for (int i = 0; i < p->nfree; i++) {
        const size_t size = p->free_blocks[i].bytes;
        if (size >= nbytes && size / 2 <= nbytes && (best < 0 || size < p->free_blocks[best].bytes)) best = i;
    }
    if (best >= 0) {
        *out = p->free_blocks[best];
        memmove(p->free_blocks + best, p->free_blocks + best + 1, (size_t)(p->nfree - best - 1) * sizeof(block));
        p->nfree--;
        return 0;
    }
    void *data = NULL;
    const size_t bytes = nbytes ? nbytes : 1;
    const int huge = bytes >= MLC_HUGE_FROM_BYTES;
    if (posix_memalign(&data, huge ? MLC_HUGE_PAGE_BYTES : BLOCK_ALIGN, bytes)) {
        PyErr_NoMemory();
        return -1;
    }
#ifdef MADV_HUGEPAGE
    /* As NumPy does for its own large arrays: where transparent huge pages are on
     * request only ("madvise"), ask; a ring streaming 64 MiB through 4 KiB pages
     * misses the TLB all along, and the inputs it reads are NumPy's, huge. */
    if (huge) madvise(data, bytes, MADV_HUGEPAGE);
#endif
    memset(data, 0, bytes); /* every page faults now, once */
    out->data = data;
    out->bytes = bytes;
    return 0;
}

/* The base object of arrays over a block: its end gives the block back. */
typedef struct {
    PyObject_HEAD
    results_pool *pool;
    block blk;
} lease;

static void lease_dealloc(PyObject *self) {
    lease *l = (lease *)self;
    pool_give_back(l->pool, l->blk);
    pool_release(l->pool);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject lease_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ml_comm.arrays._numpy_glue.lease",
    .tp_basicsize = sizeof(lease),
    .tp_dealloc = lease_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pool block lent to arrays; it goes back when they are gone.",
};

/* A C-contiguous array of descr (stolen) and dims over a pool block. */
static PyObject *pool_array(results_pool *p, PyArray_Descr *descr, int nd, npy_intp *dims, size_t nbytes) {
    block b;
    if (pool_take_block(p, nbytes, &b)) {
        Py_DECREF(descr);
        return NULL;
    }
    lease *l = PyObject_New(lease, &lease_type);
    if (!l) {
        pool_give_back(p, b);
        Py_DECREF(descr);
        return NULL;
    }
    l->pool = p;
    l->blk = b;
    p->refs++;
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, nd, dims, NULL, b.data, NPY_ARRAY_CARRAY, NULL);
    if (!arr) {
        Py_DECREF(l);
        return NULL;
    }
    if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)l) < 0) { /* steals l */
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

static void pool_capsule_free(PyObject *capsule) {
    pool_release(PyCapsule_GetPointer(capsule, POOL_NAME));
}

static PyObject *pool_new(PyObject *module, PyObject *args) {
    int keep;
    if (!PyArg_ParseTuple(args, "i:pool", &keep)) return NULL;
    if (keep < 0 || keep > MAX_KEEP) {
        PyErr_Format(PyExc_ValueError, "pool keeps 0 to %d free blocks, got %d", MAX_KEEP, keep);
        return NULL;
    }
    results_pool *p = PyMem_Calloc(1, sizeof *p);
    if (!p) return PyErr_NoMemory();
    p->refs = 1;
    p->keep = keep;
    PyObject *capsule = PyCapsule_New(p, POOL_NAME, pool_capsule_free);
    if (!capsule) PyMem_Free(p);
    return capsule;
}

static PyObject *take(PyObject *module, PyObject *args) {
    PyObject *capsule;
    Py_ssize_t nbytes;
    if (!PyArg_ParseTuple(args, "On:take", &capsule, &nbytes)) return NULL;
    results_pool *p = PyCapsule_GetPointer(capsule, POOL_NAME);
    if (!p) return NULL;
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "take: nbytes < 0");
        return NULL;
    }
    npy_intp dims[1] = {nbytes};
    return pool_array(p, PyArray_DescrFromType(NPY_UINT8), 1, dims, (size_t)nbytes);
}

static PyObject *free_blocks(PyObject *module, PyObject *capsule) {
    results_pool *p = PyCapsule_GetPointer(capsule, POOL_NAME);
    return p ? PyLong_FromLong(p->nfree) : NULL;
}

/* ---- gradients([grad]) ------------------------------------------------------------- */

typedef struct {
    allreduce_into_fn allreduce_into;
    begin_call_fn begin_call;
    end_call_fn end_call;
    shape_digest_fn shape_digest;
    mlc_team *team;
    results_pool *pool;
    Py_ssize_t pool_from_bytes; /* smaller results are fresh arrays: a few pages fault little */
    int ndtypes;
    int type_nums[MAX_DTYPES]; /* NumPy's type number -> the core's dtype code */
    int codes[MAX_DTYPES];
} binding;

static void binding_capsule_free(PyObject *capsule) {
    binding *b = PyCapsule_GetPointer(capsule, BINDING_NAME);
    pool_release(b->pool);
    PyMem_Free(b);
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
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ii", &b->type_nums[i], &b->codes[i])) {
            Py_DECREF(seq);
            return -1;
        }
    }
    b->ndtypes = (int)n;
    Py_DECREF(seq);
    return 0;
}

static PyObject *bind(PyObject *module, PyObject *args) {
    unsigned long long allreduce_into, begin_call, end_call, shape_digest, team;
    Py_ssize_t pool_from_bytes;
    PyObject *pool_capsule, *dtypes;
    if (!PyArg_ParseTuple(args, "KKKKKOnO:bind", &allreduce_into, &begin_call, &end_call, &shape_digest,
                          &team, &pool_capsule, &pool_from_bytes, &dtypes))
        return NULL;
    results_pool *p = PyCapsule_GetPointer(pool_capsule, POOL_NAME);
    if (!p) return NULL;
    if (!allreduce_into || !begin_call || !end_call || !shape_digest || !team) {
        PyErr_SetString(PyExc_ValueError, "bind needs the core's functions and a team");
        return NULL;
    }
    binding *b = PyMem_Calloc(1, sizeof *b);
    if (!b) return PyErr_NoMemory();
    b->allreduce_into = (allreduce_into_fn)(uintptr_t)allreduce_into;
    b->begin_call = (begin_call_fn)(uintptr_t)begin_call;
    b->shape_digest = (shape_digest_fn)(uintptr_t)shape_digest;
    b->end_call = (end_call_fn)(uintptr_t)end_call;
    b->team = (mlc_team *)(uintptr_t)team;
    b->pool_from_bytes = pool_from_bytes;
    if (read_dtype_table(dtypes, b)) {
        PyMem_Free(b);
        return NULL;
    }
    b->pool = p;
    p->refs++;
    PyObject *capsule = PyCapsule_New(b, BINDING_NAME, binding_capsule_free);
    if (!capsule) {
        pool_release(p);
        PyMem_Free(b);
    }
    return capsule;
}

/* The core's dtype code for a plain array: an exact ndarray, C-contiguous, aligned, in
 * native byte order (byte-swapped arrays share the native type number), writeable where
 * the result goes into it, of a dtype the core reduces. -1 for anything else, which the
 * general path takes. */
static int plain_code(const binding *b, PyObject *object, int writes_into) {
    if (!PyArray_CheckExact(object)) return -1;
    PyArrayObject *array = (PyArrayObject *)object;
    if (!PyArray_IS_C_CONTIGUOUS(array) || !PyArray_ISALIGNED(array) || PyArray_ISBYTESWAPPED(array) ||
        (writes_into && !PyArray_ISWRITEABLE(array)))
        return -1;
    const int num = PyArray_TYPE(array);
    for (int i = 0; i < b->ndtypes; i++)
        if (b->type_nums[i] == num) return b->codes[i];
    return -1;
}

/* The caller's identity tuple (step, origin, name), origins being 30-bit digests. */
_Static_assert(sizeof(long) == sizeof(int64_t), "steps and origins are 64-bit longs");
typedef struct {
    long step, origin;
    const char *name;
} identity;

static int read_identity(PyObject *tuple, identity *id) {
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) != 3 || !PyBytes_Check(PyTuple_GET_ITEM(tuple, 2))) {
        PyErr_SetString(PyExc_TypeError, "the identity is a tuple (step, origin, name: bytes)");
        return -1;
    }
    id->step = PyLong_AsLong(PyTuple_GET_ITEM(tuple, 0));
    id->origin = PyLong_AsLong(PyTuple_GET_ITEM(tuple, 1));
    id->name = PyBytes_AS_STRING(PyTuple_GET_ITEM(tuple, 2));
    return PyErr_Occurred() ? -1 : 0;
}

/* The calling thread's error text: a call's own, never another thread's that calls on the
 * same team meanwhile (with the GIL released). */
static _Thread_local char call_err[512];

/* A failed call: (status, its text). */
static PyObject *failure(int rc) {
    return Py_BuildValue("(iN)", rc, PyUnicode_DecodeUTF8(call_err, strnlen(call_err, sizeof call_err), "replace"));
}

static PyObject *average_of(const binding *b, PyObject *object, const identity *id) {
    const int code = plain_code(b, object, 0);
    if (code < 0) Py_RETURN_NONE;
    PyArrayObject *grad = (PyArrayObject *)object;
    const Py_ssize_t nbytes = PyArray_NBYTES(grad);
    PyObject *result;
    if (nbytes < b->pool_from_bytes) {
        result = PyArray_NewLikeArray(grad, NPY_CORDER, NULL, 0);
    } else {
        PyArray_Descr *descr = PyArray_DESCR(grad);
        Py_INCREF(descr); /* pool_array steals it */
        result = pool_array(b->pool, descr, PyArray_NDIM(grad), PyArray_DIMS(grad), (size_t)nbytes);
    }
    /* Made before the call begins: where it cannot be, the general path takes the call,
     * whose error (its own allocation's) is told to the other ranks' matching call. */
    if (!result) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    call_err[0] = '\0';
    int rc = b->begin_call(b->team, id->step, (uint64_t)id->origin, id->name, call_err, sizeof call_err);
    if (rc) {
        Py_DECREF(result);
        return failure(rc);
    }
    const void *source = PyArray_DATA(grad);
    void *data = PyArray_DATA((PyArrayObject *)result);
    const int64_t count = PyArray_SIZE(grad);
    _Static_assert(sizeof(npy_intp) == sizeof(int64_t), "NumPy's dimensions are the core's int64");
    const uint64_t shape = b->shape_digest(PyArray_NDIM(grad), (const int64_t *)PyArray_DIMS(grad));
    /* The call waits for the other ranks: other Python threads run meanwhile. The caller's
     * list keeps grad alive; result is ours. */
    Py_BEGIN_ALLOW_THREADS
    rc = b->allreduce_into(b->team, source, data, count, code, MLC_OP_AVERAGE, 1 << code, shape, call_err,
                           sizeof call_err);
    Py_END_ALLOW_THREADS
    b->end_call(b->team);
    if (rc) {
        Py_DECREF(result);
        return failure(rc);
    }
    return result;
}

static PyObject *reduce_in_place_of(const binding *b, PyObject *object, int op, const identity *id) {
    const int code = plain_code(b, object, 1);
    if (code < 0) Py_RETURN_NONE;
    PyArrayObject *array = (PyArrayObject *)object;
    call_err[0] = '\0';
    int rc = b->begin_call(b->team, id->step, (uint64_t)id->origin, id->name, call_err, sizeof call_err);
    if (rc) return failure(rc);
    void *data = PyArray_DATA(array);
    const int64_t count = PyArray_SIZE(array);
    const uint64_t shape = b->shape_digest(PyArray_NDIM(array), (const int64_t *)PyArray_DIMS(array));
    /* The caller's reference keeps the array alive while other Python threads run. */
    Py_BEGIN_ALLOW_THREADS
    rc = b->allreduce_into(b->team, NULL, data, count, code, op, 0, shape, call_err, sizeof call_err);
    Py_END_ALLOW_THREADS
    b->end_call(b->team);
    if (rc) return failure(rc);
    Py_INCREF(array);
    return (PyObject *)array;
}

/* "current", "_name", and the key of the thread's published identity: made at import. */
static PyObject *current_name, *thread_name_name, *published_key;

/* The calling thread's thread_state.current as published in its Python thread state's
 * dict: the entry (thread_state, current), written by publish() whenever core/calls.py
 * changes it and read here with one lookup, where thread_state.current (a threading.local)
 * costs a few. The entry keeps both alive; it goes with the thread, and is replaced when
 * another session's thread_state is published. */
static int publish_entry(PyObject *thread_state, PyObject *current) {
    PyObject *dict = PyThreadState_GetDict(); /* borrowed; NULL: none can be made */
    if (!dict) return 0;
    PyObject *entry = PyTuple_Pack(2, thread_state, current);
    if (!entry) return -1;
    const int rc = PyDict_SetItem(dict, published_key, entry);
    Py_DECREF(entry);
    return rc;
}

/* publish(thread_state, current): the calling thread's current identity tuple. */
static PyObject *publish(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "publish(thread_state, current)");
        return NULL;
    }
    return publish_entry(args[0], args[1]) < 0 ? NULL : Py_NewRef(Py_None);
}

/* thread_state.current for the calling thread, a new reference: the published one, or
 * read from the object (and published) where none is, or one of another thread_state. */
static PyObject *current_of(PyObject *thread_state) {
    PyObject *dict = PyThreadState_GetDict();
    PyObject *entry = dict ? PyDict_GetItemWithError(dict, published_key) : NULL; /* borrowed */
    if (entry && PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 2 &&
        PyTuple_GET_ITEM(entry, 0) == thread_state)
        return Py_NewRef(PyTuple_GET_ITEM(entry, 1));
    if (PyErr_Occurred()) return NULL;
    PyObject *current = PyObject_GetAttr(thread_state, current_name);
    if (current && publish_entry(thread_state, current) < 0) Py_CLEAR(current);
    return current;
}

/* The binding of `team` in `bindings` (a dict: team -> binding) and the identity of the
 * calling thread, thread_state.current (core/calls.py: the tuple (thread, named, signed),
 * signed standing while the thread keeps the name object `named`). 1: both found; 0: the
 * caller's Python path must take the call (a team without a binding, a renamed thread);
 * -1: an error is set. */
static int fast_call(PyObject *bindings, PyObject *team, PyObject *thread_state, const binding **b,
                     identity *id) {
    if (!PyDict_CheckExact(bindings)) {
        PyErr_SetString(PyExc_TypeError, "the bindings are a dict: team -> binding");
        return -1;
    }
    PyObject *capsule = PyDict_GetItemWithError(bindings, team); /* borrowed */
    if (!capsule) return PyErr_Occurred() ? -1 : 0;
    if (!(*b = PyCapsule_GetPointer(capsule, BINDING_NAME))) return -1;
    PyObject *current = current_of(thread_state);
    if (!current) return -1;
    int found = -1;
    if (!PyTuple_CheckExact(current) || PyTuple_GET_SIZE(current) != 3) {
        PyErr_SetString(PyExc_TypeError, "thread_state.current is (thread, named, signed)");
    } else {
        PyObject *name = PyObject_GetAttr(PyTuple_GET_ITEM(current, 0), thread_name_name);
        if (name && name != PyTuple_GET_ITEM(current, 1)) found = 0; /* renamed */
        else if (name) found = read_identity(PyTuple_GET_ITEM(current, 2), id) ? -1 : 1;
        Py_XDECREF(name);
    }
    Py_DECREF(current); /* the thread state keeps the tuple, and the name bytes, alive */
    return found;
}

/* mc.gradients([grad]) whole: the list, the team's binding and the thread's identity read
 * here rather than in Python (0.04 us of an 8-byte call's 1.55 at 2 ranks,
 * benchmarks/results/ab_glue/layers.txt), then average's. */
static PyObject *gradients(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "gradients(bindings, grads, team, thread_state)");
        return NULL;
    }
    if (!PyList_CheckExact(args[1]) || PyList_GET_SIZE(args[1]) != 1) Py_RETURN_NONE;
    const binding *b;
    identity id;
    const int found = fast_call(args[0], args[2], args[3], &b, &id);
    if (found <= 0) return found < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *grad = PyList_GET_ITEM(args[1], 0);
    Py_INCREF(grad); /* the list may change while the call waits with the GIL released */
    PyObject *result = average_of(b, grad, &id);
    Py_DECREF(grad);
    if (!result || !PyArray_Check(result)) return result; /* an error, None or the status */
    PyObject *list = PyList_New(1);
    if (!list) {
        Py_DECREF(result);
        return NULL;
    }
    PyList_SET_ITEM(list, 0, result);
    return list;
}

/* mc.average(array) and mc.allreduce_sum(array) whole, as gradients. */
static PyObject *reduce_in_place(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "reduce_in_place(bindings, array, team, op, thread_state)");
        return NULL;
    }
    const int op = PyLong_AsLong(args[3]);
    if (op == -1 && PyErr_Occurred()) return NULL;
    const binding *b;
    identity id;
    const int found = fast_call(args[0], args[2], args[4], &b, &id);
    if (found <= 0) return found < 0 ? NULL : Py_NewRef(Py_None);
    return reduce_in_place_of(b, args[1], op, &id);
}

static PyMethodDef methods[] = {
    {"pool", pool_new, METH_VARARGS, "pool(keep) -> a pool of touched blocks"},
    {"take", take, METH_VARARGS, "take(pool, nbytes) -> uint8 array over a pool block"},
    {"free_blocks", free_blocks, METH_O, "free_blocks(pool) -> number of free blocks"},
    {"bind", bind, METH_VARARGS,
     "bind(allreduce_into, begin_call, end_call, shape_digest, team, pool, pool_from_bytes, dtypes) -> "
     "binding"},
    {"gradients", (PyCFunction)(void (*)(void))gradients, METH_FASTCALL,
     "gradients(bindings, grads, team, thread_state) -> [new array] | None (not handled here) | "
     "(core status, text)"},
    {"publish", (PyCFunction)(void (*)(void))publish, METH_FASTCALL,
     "publish(thread_state, current): the calling thread's identity, as core/calls.py changes it"},
    {"reduce_in_place", (PyCFunction)(void (*)(void))reduce_in_place, METH_FASTCALL,
     "reduce_in_place(bindings, array, team, op, thread_state) -> array | None (not handled "
     "here) | (core status, text)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_numpy_glue",
    .m_doc = "The results' pool, the one-array gradients call and the in-place reductions, in C.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__numpy_glue(void) {
    import_array(); /* returns NULL with an ImportError set when NumPy's C API is missing */
    if (PyType_Ready(&lease_type) < 0) return NULL;
    if (!(current_name = PyUnicode_InternFromString("current"))) return NULL;
    if (!(thread_name_name = PyUnicode_InternFromString("_name"))) return NULL;
    if (!(published_key = PyUnicode_InternFromString("ml_comm.arrays._numpy_glue.current"))) return NULL;
    return PyModule_Create(&module_def);
}
