/* coiter's call path in C: a CallPlan binds a compiled kernel's parameters to the
 * operands of one call without running any Python code.
 *
 * A plan belongs to one kernel variant (value and index types fixed). Calling it with the
 * keyword dictionary of a kernel call
 *   - takes each operand's argument block (shape, level dimensions, array addresses,
 *     values address, value count): from a coiter Tensor's storage (its precomputed
 *     ``_cargs`` bytes, whose signature must be the variant's) or from a C-contiguous,
 *     aligned NumPy array when the kernel reads that operand as a dense row-major tensor;
 *   - checks that index variables shared by several operands have one size;
 *   - allocates a dense result, or the values of a result over an operand's first levels
 *     (large ones from the pool of _pool.c, whose pages are mapped already),
 *     or receives the arrays a sparse result was malloc'ed into and wraps them in NumPy
 *     arrays without copying (freed with the array);
 *   - calls the kernel's packed entry point ``int f(const int64_t* args)``, without the GIL
 *     when the call has enough work to make that worth it;
 *   - builds the result Tensor itself (dense results, and results over an operand's first
 *     levels, whose Storage caches read-only views of them) or hands the values, arrays
 *     and that operand's storage to the plan's Python finisher (assembled sparse results,
 *     error codes).
 * Whatever it does not handle (other operand types, converted operands, shape mismatches,
 * bad ``threads``) makes it return NotImplemented, and the caller takes the Python path,
 * which raises the proper error or converts the operands. It never raises for user input.
 *
 * The attribute names it reads and writes (Tensor: _storage, _pending, _name, _readers;
 * Storage: format, shape, levels, vals, _cargs, _read_only_levels) are those of coiter/tensor.py and
 * coiter/formats/storage.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION /* memory handlers (_pool.c) */
#define PY_ARRAY_UNIQUE_SYMBOL coiter_fastcall_ARRAY_API
#include <numpy/arrayobject.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>

#include "_pool.h"
#include "_load.h"

enum { OP_STORAGE = 0, OP_DENSE = 1 };  /* operand kinds: Tensor only, or Tensor or ndarray */
enum {  /* where a kernel parameter comes from */
  SRC_WORD = 0,      /* a word of the operands' argument blocks */
  SRC_RDIM = 1,      /* a dimension of the result's storage level */
  SRC_RVALS = 2,     /* the dense result's values */
  SRC_THREADS = 3,   /* the requested thread count (0: OpenMP's default, capped by work) */
  SRC_WORK = 4,      /* the call's work: stored values of every operand and dense result */
  SRC_OUT = 5,       /* array of the result arrays the kernel mallocs */
  SRC_OUT_LEN = 6,   /* their lengths */
  SRC_CAP_HINT = 7,  /* initial capacity of appended result arrays */
};
enum { RESULT_DENSE = 0, RESULT_ALLOCATED = 1, RESULT_SHARED = 2 };

#define MAX_WORDS 4096
#define MAX_PARAMS 1024
#define MAX_OPS 256
#define MAX_OUT 64
#define MAX_ORDER 64
#define INDEX32_MAX 2147483647LL
#define MAX_THREADS 4096  /* as coiter.kernel.MAX_THREADS */

typedef int (*packed_fn)(const int64_t*);

/* as coiter.runtime.kernel.LAST_ENTRIES_FACTOR */
#define LAST_ENTRIES_FACTOR 64

typedef struct {
  PyObject* keyword;  /* interned str */
  int kind;
  int64_t sig;
  int typenum;        /* OP_DENSE: element type of an accepted ndarray */
  int order;
  int offset;         /* first word of its block */
  int len;            /* block length: order + levels + arrays + 2 */
} OpSpec;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;  /* plan_vectorcall: calls build no argument tuple */
  packed_fn fn;
  PyObject* keepalive;     /* the loaded library: fn stays mapped */
  PyObject* finisher;      /* finisher(rc, vals, arrays, shape) -> result or None */
  PyObject* tensor_type;
  PyObject* storage_type;
  PyObject* rformat;       /* the result's Format */
  PyObject* rname;         /* the result's name */
  int nops, nwords, nparams, nchecks, rorder, rlevels, result_kind, rtypenum, nout;
  int result_int32;        /* result index arrays are int32: its dimensions must fit */
  int result_unzeroed;     /* the kernel zeroes the values it writes: allocate them unzeroed */
  int shared_op, shared_word, shared_levels;  /* RESULT_SHARED: operand, word of its
                              positions in the last shared level, levels shared */
  int64_t gil_work;        /* release the GIL from this much work on */
  int entries_slot;        /* out slot whose length counts the result's deepest appended
                              entries (-1: none) */
  int64_t last_entries;    /* that count in the last result: the next first capacity */
  OpSpec* ops;
  int* params;             /* (source, argument) pairs */
  int* checks;             /* pairs of words that must be equal */
  int nfixed;
  int64_t* fixed;          /* (word, value) pairs: extents the variant has as constants, or
                              (value -1) extents it does not, which must then be 0 or above
                              special_limit (another variant takes those), or (value <= -2)
                              extents of at most -2 - value (a dense workspace's limit) */
  int64_t special_limit;
  /* derived extents (index variables only compound subscripts or given extents size): words
     nwords .. nwords + nderived - 1, taken from the extents the Python path solved for the
     last operand shapes it saw (key: the values of the words in key_words); other shapes
     take the Python path, which solves them and remembers its answer here */
  int nderived, nkey, derived_ok;
  int* key_words;
  int64_t* derived_key;
  int64_t* derived_vals;
  int* rshape;             /* word holding each result mode's extent */
  int* rlevel_mode;        /* mode of each result storage level */
  int* out_typenums;
  int* out_itemsizes;
  /* Tensor's slots, read and written without attribute lookups */
  PyMemberDef *m_storage, *m_pending, *m_name, *m_readers;
} CallPlan;

static PyObject *s_storage, *s_pending, *s_name, *s_readers, *s_cargs;
static PyObject *s_format, *s_shape, *s_levels, *s_vals, *s_read_only_levels;

static void free_arrays(CallPlan* p) {
  PyMem_Free(p->ops); PyMem_Free(p->params); PyMem_Free(p->checks);
  PyMem_Free(p->rshape); PyMem_Free(p->rlevel_mode); PyMem_Free(p->out_typenums);
  PyMem_Free(p->out_itemsizes);
  PyMem_Free(p->fixed);
  PyMem_Free(p->key_words); PyMem_Free(p->derived_key); PyMem_Free(p->derived_vals);
  p->key_words = NULL; p->derived_key = p->derived_vals = NULL;
  p->derived_ok = 0;
  p->ops = NULL; p->params = p->checks = p->rshape = p->rlevel_mode = p->out_typenums = p->out_itemsizes = NULL;
  p->fixed = NULL;
}

static int plan_traverse(CallPlan* p, visitproc visit, void* arg) {
  Py_VISIT(p->keepalive); Py_VISIT(p->finisher); Py_VISIT(p->tensor_type);
  Py_VISIT(p->storage_type); Py_VISIT(p->rformat); Py_VISIT(p->rname);
  return 0;
}

static int plan_clear(CallPlan* p) {
  Py_CLEAR(p->keepalive); Py_CLEAR(p->finisher); Py_CLEAR(p->tensor_type);
  Py_CLEAR(p->storage_type); Py_CLEAR(p->rformat); Py_CLEAR(p->rname);
  if (p->ops) for (int k = 0; k < p->nops; k++) Py_CLEAR(p->ops[k].keyword);
  return 0;
}

static void plan_dealloc(CallPlan* p) {
  PyObject_GC_UnTrack(p);
  plan_clear(p);
  free_arrays(p);
  Py_TYPE(p)->tp_free((PyObject*)p);
}

/* Read a tuple of ints into a new int array of exactly ``n`` entries (n < 0: any length,
 * stored in *n_out). */
static int* int_tuple(PyObject* t, Py_ssize_t n, int* n_out, const char* what) {
  if (!PyTuple_Check(t)) { PyErr_Format(PyExc_TypeError, "%s must be a tuple", what); return NULL; }
  Py_ssize_t len = PyTuple_GET_SIZE(t);
  if (n >= 0 && len != n) { PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %zd", what, len, n); return NULL; }
  int* out = PyMem_Malloc(sizeof(int) * (size_t)(len > 0 ? len : 1));
  if (!out) { PyErr_NoMemory(); return NULL; }
  for (Py_ssize_t k = 0; k < len; k++) {
    long v = PyLong_AsLong(PyTuple_GET_ITEM(t, k));
    if (v == -1 && PyErr_Occurred()) { PyMem_Free(out); return NULL; }
    out[k] = (int)v;
  }
  if (n_out) *n_out = (int)len;
  return out;
}

/* The member definition of slot ``name`` of class ``type`` (kept alive by the type): an
 * object slot (as __slots__ makes), which slot_get and slot_init read and set in place. */
static PyMemberDef* slot_of(PyObject* type, PyObject* name) {
  PyObject* descr = PyObject_GetAttr(type, name);
  if (!descr) return NULL;
  PyMemberDef* def = NULL;
  if (Py_IS_TYPE(descr, &PyMemberDescr_Type) && ((PyMemberDescrObject*)descr)->d_member->type == T_OBJECT_EX)
    def = ((PyMemberDescrObject*)descr)->d_member;
  else
    PyErr_Format(PyExc_TypeError, "%R is not a slot of %R", name, type);
  Py_DECREF(descr);
  return def;
}

/* CallPlan(fn, keepalive, ops, params, checks, rshape, rlevel_mode, result_kind,
 *          (shared_op, shared_word, shared_levels), rtypenum,
 *          result_int32, out_typenums, out_itemsizes, fixed, special_limit, finisher,
 *          tensor_type, storage_type, rformat, rname, gil_work, entries_slot, result_unzeroed,
 *          key_words, nderived)
 * ops: tuple of (keyword, kind, sig, typenum, order, block_len) in block order; words from
 * nwords on are the nderived derived extents (see remember). */
static int plan_init(CallPlan* p, PyObject* args, PyObject* kwds) {
  unsigned long long fn;
  int shared_op, shared_word, shared_levels;
  PyObject *keepalive, *ops, *params, *checks, *rshape, *rlevel_mode, *out_typenums, *out_itemsizes;
  PyObject* fixed;
  long long special_limit;
  PyObject *finisher, *tensor_type, *storage_type, *rformat, *rname;
  int result_kind, rtypenum, result_int32;
  long long gil_work;
  int entries_slot, result_unzeroed, nderived;
  PyObject* key_words;
  if (!PyArg_ParseTuple(args, "KOO!O!O!O!O!i(iii)ipO!O!O!LOOOOULipO!i", &fn, &keepalive, &PyTuple_Type, &ops,
                        &PyTuple_Type, &params, &PyTuple_Type, &checks, &PyTuple_Type, &rshape,
                        &PyTuple_Type, &rlevel_mode, &result_kind, &shared_op, &shared_word,
                        &shared_levels, &rtypenum, &result_int32,
                        &PyTuple_Type, &out_typenums, &PyTuple_Type, &out_itemsizes,
                        &PyTuple_Type, &fixed, &special_limit, &finisher, &tensor_type, &storage_type,
                        &rformat, &rname, &gil_work, &entries_slot, &result_unzeroed,
                        &PyTuple_Type, &key_words, &nderived))
    return -1;
  if (!fn) { PyErr_SetString(PyExc_ValueError, "null kernel address"); return -1; }
  if (!PyType_Check(tensor_type) || !PyType_Check(storage_type)) {
    PyErr_SetString(PyExc_TypeError, "tensor_type and storage_type must be classes"); return -1;
  }
  plan_clear(p);
  free_arrays(p);
  if (!(p->m_storage = slot_of(tensor_type, s_storage)) || !(p->m_pending = slot_of(tensor_type, s_pending)) ||
      !(p->m_name = slot_of(tensor_type, s_name)) || !(p->m_readers = slot_of(tensor_type, s_readers)))
    return -1;
  p->fn = (packed_fn)(uintptr_t)fn;
  p->last_entries = 0;
  p->nops = (int)PyTuple_GET_SIZE(ops);
  if (p->nops > MAX_OPS) { PyErr_SetString(PyExc_ValueError, "too many operands"); return -1; }
  p->ops = PyMem_Calloc((size_t)(p->nops > 0 ? p->nops : 1), sizeof(OpSpec));
  if (!p->ops) { PyErr_NoMemory(); return -1; }
  int offset = 0;
  for (int k = 0; k < p->nops; k++) {
    PyObject* spec = PyTuple_GET_ITEM(ops, k);
    PyObject* keyword;
    long long sig;
    int kind, typenum, order, len;
    if (!PyArg_ParseTuple(spec, "UiLiii", &keyword, &kind, &sig, &typenum, &order, &len)) return -1;
    if (order > MAX_ORDER || len < 3 * order + 2 || (kind == OP_DENSE && len != 3 * order + 2)) {
      PyErr_SetString(PyExc_ValueError, "bad operand block");
      return -1;
    }
    Py_INCREF(keyword);
    PyUnicode_InternInPlace(&keyword);
    OpSpec* o = &p->ops[k];
    o->keyword = keyword; o->kind = kind; o->sig = sig; o->typenum = typenum;
    o->order = order; o->offset = offset; o->len = len;
    offset += len;
  }
  p->nwords = offset;
  if (nderived < 0 || p->nwords + nderived > MAX_WORDS) {
    PyErr_SetString(PyExc_ValueError, "too many argument words"); return -1;
  }
  p->nderived = nderived;
  int nall = p->nwords + nderived;  /* words a source may name */
  if (!(p->key_words = int_tuple(key_words, -1, &p->nkey, "key_words"))) return -1;
  for (int k = 0; k < p->nkey; k++)
    if (p->key_words[k] < 0 || p->key_words[k] >= p->nwords) { PyErr_SetString(PyExc_ValueError, "bad key word"); return -1; }
  p->derived_key = PyMem_Malloc(sizeof(int64_t) * (size_t)(p->nkey > 0 ? p->nkey : 1));
  p->derived_vals = PyMem_Malloc(sizeof(int64_t) * (size_t)(nderived > 0 ? nderived : 1));
  if (!p->derived_key || !p->derived_vals) { PyErr_NoMemory(); return -1; }
  int n;
  if (!(p->params = int_tuple(params, -1, &n, "params"))) return -1;
  if (n % 2 || n / 2 > MAX_PARAMS) { PyErr_SetString(PyExc_ValueError, "bad params"); return -1; }
  p->nparams = n / 2;
  if (!(p->checks = int_tuple(checks, -1, &n, "checks"))) return -1;
  if (n % 2) { PyErr_SetString(PyExc_ValueError, "bad checks"); return -1; }
  p->nchecks = n / 2;
  if (!(p->rshape = int_tuple(rshape, -1, &p->rorder, "rshape"))) return -1;
  if (!(p->rlevel_mode = int_tuple(rlevel_mode, -1, &p->rlevels, "rlevel_mode"))) return -1;
  if (!(p->out_typenums = int_tuple(out_typenums, -1, &p->nout, "out_typenums"))) return -1;
  if (!(p->out_itemsizes = int_tuple(out_itemsizes, p->nout, NULL, "out_itemsizes"))) return -1;
  Py_ssize_t nfixed = PyTuple_GET_SIZE(fixed);
  if (nfixed % 2) { PyErr_SetString(PyExc_ValueError, "bad fixed"); return -1; }
  p->nfixed = (int)(nfixed / 2);
  p->special_limit = special_limit;
  p->fixed = PyMem_Malloc(sizeof(int64_t) * (size_t)(nfixed > 0 ? nfixed : 1));
  if (!p->fixed) { PyErr_NoMemory(); return -1; }
  for (Py_ssize_t k = 0; k < nfixed; k++) {
    p->fixed[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(fixed, k));
    if (p->fixed[k] == -1 && PyErr_Occurred()) return -1;
  }
  for (int k = 0; k < p->nfixed; k++)
    if (p->fixed[2 * k] < 0 || p->fixed[2 * k] >= nall) { PyErr_SetString(PyExc_ValueError, "bad fixed word"); return -1; }
  if (p->rorder > MAX_ORDER || p->rlevels > MAX_ORDER || p->nout > MAX_OUT) {
    PyErr_SetString(PyExc_ValueError, "result too large for a call plan"); return -1;
  }
  for (int k = 0; k < p->nparams; k++) {
    int src = p->params[2 * k], a = p->params[2 * k + 1];
    if ((src == SRC_WORD && (a < 0 || a >= nall)) || (src == SRC_RDIM && (a < 0 || a >= p->rlevels))) {
      PyErr_SetString(PyExc_ValueError, "parameter source out of range"); return -1;
    }
  }
  for (int k = 0; k < 2 * p->nchecks; k++)
    if (p->checks[k] < 0 || p->checks[k] >= nall) { PyErr_SetString(PyExc_ValueError, "bad check"); return -1; }
  for (int k = 0; k < p->rorder; k++)
    if (p->rshape[k] < 0 || p->rshape[k] >= nall) { PyErr_SetString(PyExc_ValueError, "bad rshape"); return -1; }
  for (int k = 0; k < p->rlevels; k++)
    if (p->rlevel_mode[k] < 0 || p->rlevel_mode[k] >= p->rorder) { PyErr_SetString(PyExc_ValueError, "bad rlevel_mode"); return -1; }
  if (result_kind == RESULT_SHARED && (shared_op < 0 || shared_op >= p->nops || shared_word < 0 ||
                                      shared_word >= p->nwords || shared_levels < 1 || shared_levels > p->rlevels)) {
    PyErr_SetString(PyExc_ValueError, "bad shared result"); return -1;
  }
  p->shared_op = shared_op; p->shared_word = shared_word; p->shared_levels = shared_levels;
  p->result_kind = result_kind;
  p->rtypenum = rtypenum;
  p->result_int32 = result_int32;
  p->gil_work = gil_work;
  p->entries_slot = entries_slot;
  p->result_unzeroed = result_unzeroed;
  Py_INCREF(keepalive); p->keepalive = keepalive;
  Py_INCREF(finisher); p->finisher = finisher;
  Py_INCREF(tensor_type); p->tensor_type = tensor_type;
  Py_INCREF(storage_type); p->storage_type = storage_type;
  Py_INCREF(rformat); p->rformat = rformat;
  Py_INCREF(rname); p->rname = rname;
  return 0;
}

/* The object in slot ``m`` of ``obj`` (borrowed; NULL while unset): the slots are object
 * slots (slot_of took them from the class's __slots__), read without PyMember_GetOne's new
 * reference, which a cold call paid for in cache misses. */
static inline PyObject* slot_get(PyObject* obj, const PyMemberDef* m) {
  return *(PyObject**)((char*)obj + m->offset);
}

/* Set slot ``m`` of a freshly allocated ``obj`` (the slot is unset) to ``value``. */
static inline void slot_init(PyObject* obj, const PyMemberDef* m, PyObject* value) {
  Py_INCREF(value);
  *(PyObject**)((char*)obj + m->offset) = value;
}

/* Fill ``w`` with operand k's block from ``obj``; 1 on success, 0 when the fast path does
 * not apply, -1 on a Python error. ``hold`` receives a new reference kept over the call. */
static int bind_operand(CallPlan* p, const OpSpec* o, PyObject* obj, int64_t* w, PyObject** hold) {
  if (PyArray_Check(obj)) {
    PyArrayObject* a = (PyArrayObject*)obj;
    if (o->kind != OP_DENSE || PyArray_NDIM(a) != o->order || !PyArray_IS_C_CONTIGUOUS(a) ||
        !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a))
      return 0;
    if (PyArray_TYPE(a) != o->typenum && !PyArray_EquivTypenums(PyArray_TYPE(a), o->typenum)) return 0;
    const npy_intp* dims = PyArray_DIMS(a);
    int64_t positions = 1;
    for (int m = 0; m < o->order; m++) {  /* dense levels: the shape, and its running product */
      w[m] = w[o->order + m] = dims[m];
      positions *= dims[m];
      w[2 * o->order + m] = positions;
    }
    w[o->len - 2] = (int64_t)(uintptr_t)PyArray_DATA(a);
    w[o->len - 1] = (int64_t)PyArray_SIZE(a);
    Py_INCREF(obj);
    *hold = obj;
    return 1;
  }
  if (!PyObject_TypeCheck(obj, (PyTypeObject*)p->tensor_type)) return 0;
  PyObject* pending = slot_get(obj, p->m_pending);
  if (pending != Py_None) return 0;  /* a DSL assignment not computed yet (or a Tensor not
                                        initialised): the Python path runs it, or says why */
  PyObject* storage = slot_get(obj, p->m_storage);
  if (!storage) return 0;
  Py_INCREF(storage);
  PyObject* cargs = NULL;
  PyObject* dict = PyObject_GenericGetDict(storage, NULL);
  if (dict) {
    cargs = PyDict_GetItemWithError(dict, s_cargs);  /* borrowed */
    Py_XINCREF(cargs);
    Py_DECREF(dict);
  }
  if (!cargs && !PyErr_Occurred()) cargs = PyObject_GetAttr(storage, s_cargs);  /* computed once */
  if (!cargs) { Py_DECREF(storage); return -1; }
  int ok = PyBytes_Check(cargs) && PyBytes_GET_SIZE(cargs) == (Py_ssize_t)(8 * (o->len + 1));
  if (ok) {
    const int64_t* words = (const int64_t*)PyBytes_AS_STRING(cargs);
    ok = words[0] == o->sig;
    if (ok) memcpy(w, words + 1, sizeof(int64_t) * (size_t)o->len);
  }
  Py_DECREF(cargs);
  if (!ok) { Py_DECREF(storage); return 0; }
  *hold = storage;  /* the storage keeps every array alive */
  return 1;
}

/* A kernel's arrays come from the pool's allocator (or libc's, whose blocks its free and
   realloc take too) */
static void free_capsule(PyObject* capsule) {
  pool_allocator()->free(PyCapsule_GetPointer(capsule, "coiter.malloc"));
}

/* A 1-D array owning the kernel's ``ptr`` (shrunk to ``len``); zeros when ptr is NULL. */
static PyObject* adopt(void* ptr, int64_t len, int typenum, int itemsize) {
  npy_intp n = (npy_intp)len;
  if (!ptr) return PyArray_ZEROS(1, &n, typenum, 0);
  void* shrunk = pool_allocator()->realloc(ptr, (size_t)(len > 0 ? len : 1) * (size_t)itemsize);
  if (shrunk) ptr = shrunk;
  PyObject* capsule = PyCapsule_New(ptr, "coiter.malloc", free_capsule);
  if (!capsule) { pool_allocator()->free(ptr); return NULL; }
  PyObject* arr = PyArray_SimpleNewFromData(1, &n, typenum, ptr);
  if (!arr) { Py_DECREF(capsule); return NULL; }
  if (PyArray_SetBaseObject((PyArrayObject*)arr, capsule) < 0) { Py_DECREF(arr); return NULL; }
  return arr;
}

/* Tensor(name=rname) over Storage(rformat, shape, levels, vals), built without running
 * their Python constructors (the values come from a kernel: nothing to check). The levels
 * are empty dicts, but for the first ``nshared``, which come from ``shared`` (a tuple of
 * the operand's read-only level arrays). */
static PyObject* result_tensor(CallPlan* p, PyObject* shape, PyObject* vals, PyObject* shared, int nshared) {
  PyTypeObject* st = (PyTypeObject*)p->storage_type;
  PyTypeObject* tt = (PyTypeObject*)p->tensor_type;
  PyObject *storage = NULL, *tensor = NULL, *levels = NULL, *dict = NULL;
  if (!(storage = st->tp_alloc(st, 0)) || !(tensor = tt->tp_alloc(tt, 0)) ||
      !(levels = PyTuple_New(p->rlevels)))
    goto fail;
  for (int k = 0; k < p->rlevels; k++) {
    PyObject* d = k < nshared ? PyTuple_GET_ITEM(shared, k) : PyDict_New();
    if (!d) goto fail;
    if (k < nshared) Py_INCREF(d);
    PyTuple_SET_ITEM(levels, k, d);
  }
  if (!(dict = PyObject_GenericGetDict(storage, NULL)) ||
      PyDict_SetItem(dict, s_format, p->rformat) < 0 || PyDict_SetItem(dict, s_shape, shape) < 0 ||
      PyDict_SetItem(dict, s_levels, levels) < 0 || PyDict_SetItem(dict, s_vals, vals) < 0)
    goto fail;
  slot_init(tensor, p->m_storage, storage);
  slot_init(tensor, p->m_pending, Py_None);
  slot_init(tensor, p->m_name, p->rname);
  slot_init(tensor, p->m_readers, Py_None);
  Py_DECREF(dict);
  Py_DECREF(levels);
  Py_DECREF(storage);
  return tensor;
fail:
  Py_XDECREF(dict); Py_XDECREF(levels); Py_XDECREF(tensor); Py_XDECREF(storage);
  return NULL;
}

/* plan(operands, threads) for operands, a dict (``extra`` of its entries are not operands:
 * a kernel call's ``threads`` keyword), and threads: None or an int */
static PyObject* plan_run(CallPlan* p, PyObject* operands, PyObject* threads_obj, int extra) {
  PyObject* hold[MAX_OPS];
  PyObject *result = NULL, *vals = NULL, *shape = NULL, *arrays = NULL;
  int64_t w[MAX_WORDS], argv[MAX_PARAMS], rshape[MAX_ORDER], rdims[MAX_ORDER];
  void* out[MAX_OUT] = {0};
  int64_t out_len[MAX_OUT] = {0};
  int64_t threads = 0, size = 1, work = 0, cap_hint;
  int held = 0, rc;

  if (PyDict_GET_SIZE(operands) != p->nops + extra) Py_RETURN_NOTIMPLEMENTED;
  if (threads_obj != Py_None) {
    if (!PyLong_CheckExact(threads_obj)) Py_RETURN_NOTIMPLEMENTED;
    threads = PyLong_AsLongLong(threads_obj);
    if (threads == -1 && PyErr_Occurred()) { PyErr_Clear(); Py_RETURN_NOTIMPLEMENTED; }
    if (threads < 1 || threads > MAX_THREADS) Py_RETURN_NOTIMPLEMENTED;  /* the Python path explains */
  }

  for (int k = 0; k < p->nops; k++) {
    const OpSpec* o = &p->ops[k];
    PyObject* obj = PyDict_GetItemWithError(operands, o->keyword);
    if (!obj) {
      if (PyErr_Occurred()) goto done;
      goto not_implemented;
    }
    int r = bind_operand(p, o, obj, w + o->offset, &hold[held]);
    if (r < 0) goto done;
    if (r == 0) goto not_implemented;
    held++;
  }
  if (p->nderived) {  /* derived extents: those remembered for these shapes, or Python's */
    if (!p->derived_ok) goto not_implemented;
    for (int k = 0; k < p->nkey; k++)
      if (w[p->key_words[k]] != p->derived_key[k]) goto not_implemented;
    memcpy(w + p->nwords, p->derived_vals, sizeof(int64_t) * (size_t)p->nderived);
  }
  for (int k = 0; k < p->nchecks; k++)
    if (w[p->checks[2 * k]] != w[p->checks[2 * k + 1]]) goto not_implemented;
  for (int k = 0; k < p->nfixed; k++) {  /* another extent: another variant */
    int64_t extent = w[p->fixed[2 * k]], value = p->fixed[2 * k + 1];
    if (value >= 0 ? extent != value
        : value == -1 ? (extent > 0 && extent <= p->special_limit) : extent > -2 - value)
      goto not_implemented;
  }
  for (int m = 0; m < p->rorder; m++) rshape[m] = w[p->rshape[m]];
  for (int k = 0; k < p->rlevels; k++) {
    rdims[k] = rshape[p->rlevel_mode[k]];
    if (p->result_int32 && rdims[k] >= INDEX32_MAX) goto not_implemented;
    /* saturating: a dense size past int64 is left to the Python path's error */
    size = (rdims[k] > 0 && size > INT64_MAX / rdims[k]) ? INT64_MAX : size * rdims[k];
  }
  for (int k = 0; k < p->nops; k++) {
    int64_t nvals = w[p->ops[k].offset + p->ops[k].len - 1];
    work += nvals;
  }
  /* as coiter.runtime.kernel.capacity_hint: every operand's values or the last result's
     entries, at most the dense size */
  int64_t last = p->last_entries / LAST_ENTRIES_FACTOR > work ? work * LAST_ENTRIES_FACTOR : p->last_entries;
  cap_hint = work > last ? work : last;
  cap_hint = cap_hint < size ? cap_hint : size;
  if (cap_hint < 16) cap_hint = 16;
  if (p->result_kind == RESULT_DENSE) {
    if (size <= 0 || size == INT64_MAX) goto not_implemented;  /* empty results: the Python path */
    npy_intp n = (npy_intp)size;
    vals = pool_array(n, p->rtypenum, !p->result_unzeroed);
    if (!vals) goto done;
    work += size;
  } else if (p->result_kind == RESULT_SHARED) {
    int64_t shared = w[p->shared_word];  /* positions of the last shared level */
    for (int k = p->shared_levels; k < p->rlevels; k++) shared *= rdims[k];
    if (shared <= 0) goto not_implemented;  /* empty results: the Python path */
    npy_intp n = (npy_intp)shared;
    vals = pool_array(n, p->rtypenum, !p->result_unzeroed);
    if (!vals) goto done;
  }

  for (int k = 0; k < p->nparams; k++) {
    int a = p->params[2 * k + 1];
    switch (p->params[2 * k]) {
      case SRC_WORD: argv[k] = w[a]; break;
      case SRC_RDIM: argv[k] = rdims[a]; break;
      case SRC_RVALS: argv[k] = vals ? (int64_t)(uintptr_t)PyArray_DATA((PyArrayObject*)vals) : 0; break;
      case SRC_THREADS: argv[k] = threads; break;
      case SRC_WORK: argv[k] = work; break;
      case SRC_OUT: argv[k] = (int64_t)(uintptr_t)out; break;
      case SRC_OUT_LEN: argv[k] = (int64_t)(uintptr_t)out_len; break;
      case SRC_CAP_HINT: argv[k] = cap_hint; break;
      default: argv[k] = 0;
    }
  }
  if (work >= p->gil_work) {
    Py_BEGIN_ALLOW_THREADS
    rc = p->fn(argv);
    Py_END_ALLOW_THREADS
  } else {
    rc = p->fn(argv);
  }

  if (p->result_kind == RESULT_ALLOCATED) {
    if (rc == 0 && p->entries_slot >= 0 && p->entries_slot < p->nout)
      p->last_entries = out_len[p->entries_slot];
    /* adopt every array first, so that none leaks whatever fails below */
    if (!(arrays = PyTuple_New(p->nout))) goto done;
    for (int k = 0; k < p->nout; k++) {
      PyObject* a = adopt(out[k], out_len[k], p->out_typenums[k], p->out_itemsizes[k]);
      out[k] = NULL;
      if (!a) goto done;
      PyTuple_SET_ITEM(arrays, k, a);
    }
  }
  if (!(shape = PyTuple_New(p->rorder))) goto done;
  for (int m = 0; m < p->rorder; m++) {
    PyObject* d = PyLong_FromLongLong(rshape[m]);
    if (!d) goto done;
    PyTuple_SET_ITEM(shape, m, d);
  }
  if (p->result_kind == RESULT_DENSE && rc == 0) {
    result = result_tensor(p, shape, vals, NULL, 0);
  } else if (p->result_kind == RESULT_SHARED && rc == 0) {
    PyObject* shared = PyObject_GetAttr(hold[p->shared_op], s_read_only_levels);  /* cached */
    if (!shared) goto done;
    if (PyTuple_Check(shared) && PyTuple_GET_SIZE(shared) >= p->shared_levels)
      result = result_tensor(p, shape, vals, shared, p->shared_levels);
    else
      PyErr_SetString(PyExc_TypeError, "_read_only_levels: not a tuple of the operand's levels");
    Py_DECREF(shared);
  } else
    result = PyObject_CallFunction(p->finisher, "iOOOO", rc, vals ? vals : Py_None,
                                   arrays ? arrays : Py_None, shape,
                                   p->result_kind == RESULT_SHARED ? hold[p->shared_op] : Py_None);
  goto done;

not_implemented:
  result = Py_NotImplemented;
  Py_INCREF(result);
done:
  for (int k = 0; k < p->nout; k++) pool_allocator()->free(out[k]);  /* only those not adopted */
  Py_XDECREF(arrays);
  Py_XDECREF(shape);
  Py_XDECREF(vals);
  for (int k = 0; k < held; k++) Py_DECREF(hold[k]);
  return result;
}

/* plan(operands: dict, threads) -> result | NotImplemented | what the finisher returns.
 * A vectorcall: the arguments come as an array, checked here without PyArg_ParseTuple, whose
 * generic parsing was a tenth of a cold call's misses. */
static PyObject* plan_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if ((kwnames && PyTuple_GET_SIZE(kwnames)) || PyVectorcall_NARGS(nargsf) != 2 || !PyDict_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "CallPlan takes two positional arguments: operands (a dict) and threads");
    return NULL;
  }
  if (!((CallPlan*)self)->fn) {  /* made by __new__ alone: no kernel to call */
    PyErr_SetString(PyExc_TypeError, "CallPlan was not initialised");
    return NULL;
  }
  return plan_run((CallPlan*)self, args[0], args[1], 0);
}

/* plan.remember(key, values): the derived extents ``values`` (nderived of them) the Python
 * path solved for operands whose key words hold ``key``; later calls with those shapes take
 * them from here. */
static PyObject* plan_remember(CallPlan* p, PyObject* args) {
  PyObject *key, *values;
  if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &key, &PyTuple_Type, &values)) return NULL;
  if (PyTuple_GET_SIZE(key) != p->nkey || PyTuple_GET_SIZE(values) != p->nderived) {
    PyErr_SetString(PyExc_ValueError, "remember: wrong number of key words or derived extents");
    return NULL;
  }
  p->derived_ok = 0;  /* until every value has been read */
  for (int k = 0; k < p->nkey; k++) {
    p->derived_key[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(key, k));
    if (p->derived_key[k] == -1 && PyErr_Occurred()) return NULL;
  }
  for (int k = 0; k < p->nderived; k++) {
    p->derived_vals[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(values, k));
    if (p->derived_vals[k] == -1 && PyErr_Occurred()) return NULL;
  }
  p->derived_ok = 1;
  Py_RETURN_NONE;
}

static PyMethodDef plan_methods[] = {
  {"remember", (PyCFunction)plan_remember, METH_VARARGS,
   "remember(key, values): derived extents for operands of these shapes."},
  {NULL, NULL, 0, NULL},
};

static PyObject* plan_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  CallPlan* p = (CallPlan*)type->tp_alloc(type, 0);
  if (p) p->vectorcall = plan_vectorcall;
  return (PyObject*)p;
}

static PyTypeObject CallPlanType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "coiter.runtime._fastcall.CallPlan",
  .tp_basicsize = sizeof(CallPlan),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
  .tp_vectorcall_offset = offsetof(CallPlan, vectorcall),
  .tp_doc = "A compiled kernel bound for fast calls: plan(operands, threads).",
  .tp_new = plan_new,
  .tp_init = (initproc)plan_init,
  .tp_dealloc = (destructor)plan_dealloc,
  .tp_traverse = (traverseproc)plan_traverse,
  .tp_clear = (inquiry)plan_clear,
  .tp_call = PyVectorcall_Call,
  .tp_methods = plan_methods,
};

/* KernelCall: the base of coiter.Kernel. Its call hands the keyword operands straight to
 * the plan of the variant that ran last, so a cached call runs no Python code (in a call
 * that follows other libraries' work, the Python frame of a ``__call__`` method and its
 * attribute lookups were a third of the time). SciPy matrices become Tensors through the
 * subclass's ``_convert_operands(dict) -> dict`` and the plan is tried again. Whatever the
 * plan still declines (positional arguments, operands it does not bind, kernels reading
 * gathered operands) goes to the subclass's ``_call(threads=None, **operands)``. */
typedef struct {
  PyObject_HEAD
  PyObject* plan;  /* _plan: the CallPlan of the variant that ran last, or None */
  char direct;     /* _direct: calls' operands are the plan's as given (no gathers) */
} KernelCall;

static PyObject *s_call, *s_convert, *s_threads;

/* plan's result for a call's keyword arguments (operands, and maybe ``threads``) */
static PyObject* kernel_try(CallPlan* plan, PyObject* kwargs) {
  PyObject* threads = PyDict_GetItemWithError(kwargs, s_threads);
  if (!threads && PyErr_Occurred()) return NULL;
  return plan_run(plan, kwargs, threads ? threads : Py_None, threads != NULL);
}

static PyObject* kernel_call(KernelCall* k, PyObject* args, PyObject* kwargs) {
  PyObject* plan = k->plan;
  if (k->direct && plan && Py_IS_TYPE(plan, &CallPlanType) && ((CallPlan*)plan)->fn &&
      kwargs && PyTuple_GET_SIZE(args) == 0) {
    Py_INCREF(plan);  /* Python code run below (finisher, conversion) may replace _plan */
    PyObject* out = kernel_try((CallPlan*)plan, kwargs);
    if (out == Py_NotImplemented) {
      Py_DECREF(out);
      PyObject* converted = PyObject_CallMethodOneArg((PyObject*)k, s_convert, kwargs);
      out = !converted ? NULL : PyDict_Check(converted) ? kernel_try((CallPlan*)plan, converted)
                                                         : Py_NewRef(Py_NotImplemented);
      Py_XDECREF(converted);
    }
    Py_DECREF(plan);
    if (!out || (out != Py_NotImplemented && out != Py_None)) return out;
    Py_DECREF(out);
  }
  PyObject* slow = PyObject_GetAttr((PyObject*)k, s_call);
  if (!slow) return NULL;
  PyObject* out = PyObject_Call(slow, args, kwargs);
  Py_DECREF(slow);
  return out;
}

static int kernel_traverse(KernelCall* k, visitproc visit, void* arg) {
  Py_VISIT(k->plan);
  return 0;
}

static int kernel_clear(KernelCall* k) {
  Py_CLEAR(k->plan);
  return 0;
}

static void kernel_dealloc(KernelCall* k) {
  PyObject_GC_UnTrack(k);
  kernel_clear(k);
  Py_TYPE(k)->tp_free((PyObject*)k);
}

static PyMemberDef kernel_members[] = {
  {"_plan", T_OBJECT, offsetof(KernelCall, plan), 0, "CallPlan of the variant that ran last, or None."},
  {"_direct", T_BOOL, offsetof(KernelCall, direct), 0, "Whether calls' operands go to the plan as given."},
  {NULL, 0, 0, 0, NULL},
};

static PyTypeObject KernelCallType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "coiter.runtime._fastcall.KernelCall",
  .tp_basicsize = sizeof(KernelCall),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
  .tp_doc = "Base of coiter.Kernel: calls go to its CallPlan, else to its _call method.",
  .tp_new = PyType_GenericNew,
  .tp_dealloc = (destructor)kernel_dealloc,
  .tp_traverse = (traverseproc)kernel_traverse,
  .tp_clear = (inquiry)kernel_clear,
  .tp_call = (ternaryfunc)kernel_call,
  .tp_members = kernel_members,
};

/* array(n, dtype, zero) -> a 1-D array, zeroed or not; large ones from the result pool */
static PyObject* py_array(PyObject* self, PyObject* args) {
  Py_ssize_t n;
  PyArray_Descr* descr = NULL;
  int zero;
  if (!PyArg_ParseTuple(args, "nO&p", &n, PyArray_DescrConverter, &descr, &zero)) return NULL;
  int typenum = descr->type_num;
  Py_DECREF(descr);
  if (n < 0) { PyErr_SetString(PyExc_ValueError, "negative length"); return NULL; }
  return pool_array((npy_intp)n, typenum, zero);
}

/* set_pool_limit(bytes): how many bytes of free blocks the result pool keeps (0: none) */
static PyObject* py_set_pool_limit(PyObject* self, PyObject* args) {
  unsigned long long bytes;
  if (!PyArg_ParseTuple(args, "K", &bytes)) return NULL;
  pool_set_limit((size_t)bytes);
  Py_RETURN_NONE;
}

/* allocator() -> the address of the kernels' allocator over the pool (a PoolAllocator) */
static PyObject* py_allocator(PyObject* self, PyObject* args) {
  (void)self; (void)args;
  return PyLong_FromVoidPtr((void*)pool_allocator());
}

/* load_function() -> the address of coiter_load_free_cores, which each kernel library gets
   (coiter_use_load in the C prelude) */
static PyObject* py_load_function(PyObject* self, PyObject* args) {
  (void)self; (void)args;
  return PyLong_FromVoidPtr((void*)coiter_load_free_cores);
}

/* pool_stats() -> (limit, free blocks, free bytes, blocks in use) */
static PyObject* py_pool_stats(PyObject* self, PyObject* args) {
  size_t limit, free_bytes;
  int nfree, nlive;
  pool_stats(&limit, &nfree, &free_bytes, &nlive);
  return Py_BuildValue("(KiKi)", (unsigned long long)limit, nfree, (unsigned long long)free_bytes, nlive);
}

static PyMethodDef functions[] = {
  {"array", py_array, METH_VARARGS, "array(n, dtype, zero): a 1-D array, zeroed or not; large ones from the result pool."},
  {"set_pool_limit", py_set_pool_limit, METH_VARARGS, "set_pool_limit(bytes): free bytes the result pool keeps."},
  {"allocator", py_allocator, METH_NOARGS, "allocator() -> address of the kernels' allocator over the pool."},
  {"pool_stats", py_pool_stats, METH_NOARGS, "pool_stats() -> (limit, free blocks, free bytes, blocks in use)."},
  {"load_function", py_load_function, METH_NOARGS, "load_function() -> address of the kernels' free-cores function."},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
  PyModuleDef_HEAD_INIT, "_fastcall", "coiter's C call path for compiled kernels.", -1, functions,
};

PyMODINIT_FUNC PyInit__fastcall(void) {
  import_array();
  if (pool_init() < 0 || PyType_Ready(&CallPlanType) < 0 || PyType_Ready(&KernelCallType) < 0) return NULL;
  load_init();
  struct { PyObject** slot; const char* text; } names[] = {
    {&s_storage, "_storage"}, {&s_pending, "_pending"}, {&s_name, "_name"},
    {&s_readers, "_readers"}, {&s_cargs, "_cargs"}, {&s_format, "format"},
    {&s_shape, "shape"}, {&s_levels, "levels"}, {&s_vals, "vals"},
    {&s_read_only_levels, "_read_only_levels"}, {&s_call, "_call"},
    {&s_convert, "_convert_operands"}, {&s_threads, "threads"},
  };
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
    if (!(*names[k].slot = PyUnicode_InternFromString(names[k].text))) return NULL;
  PyObject* m = PyModule_Create(&module);
  if (!m) return NULL;
  if (PyModule_AddObjectRef(m, "CallPlan", (PyObject*)&CallPlanType) < 0 ||
      PyModule_AddObjectRef(m, "KernelCall", (PyObject*)&KernelCallType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  static const struct { const char* name; int value; } constants[] = {
    {"OP_STORAGE", OP_STORAGE}, {"OP_DENSE", OP_DENSE}, {"SRC_WORD", SRC_WORD},
    {"SRC_RDIM", SRC_RDIM}, {"SRC_RVALS", SRC_RVALS}, {"SRC_THREADS", SRC_THREADS},
    {"SRC_WORK", SRC_WORK}, {"SRC_OUT", SRC_OUT}, {"SRC_OUT_LEN", SRC_OUT_LEN},
    {"SRC_CAP_HINT", SRC_CAP_HINT}, {"RESULT_DENSE", RESULT_DENSE},
    {"RESULT_ALLOCATED", RESULT_ALLOCATED}, {"RESULT_SHARED", RESULT_SHARED},
  };
  for (size_t k = 0; k < sizeof(constants) / sizeof(constants[0]); k++)
    if (PyModule_AddIntConstant(m, constants[k].name, constants[k].value) < 0) {
      Py_DECREF(m);
      return NULL;
    }
  return m;
}
