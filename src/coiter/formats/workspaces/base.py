"""Sparse workspaces: the insert-sort-merge (ISM) template and its policy interface.

A sparse workspace (Zhang, Hsu, Kjolstad, PLDI 2024) sits between loops that produce
result components out of the result's storage order and the result. Components are
``(key, value)`` pairs whose key packs the coordinates, in the result's storage order,
into one unsigned 64-bit word (each coordinate gets the bits its extent needs), so that
keys sort in the order the result stores its entries.

The template is fixed here:

- **insert** a component into the policy's accumulation array (``acc``);
- when ``acc`` is full, and once at the end, **sort** it, add up equal keys and **merge**
  it into ``all``, the sorted, duplicate-free components so far (out of place, through a
  second buffer that trades places with ``all``);
- the lowerer then **compresses** ``all`` into the result's format: ``all`` is decoded
  into a coordinate list, which the consumer loop copies like any COO operand.

A policy fills the holes: how ``acc`` takes an insert and how it is sorted. Each policy
is one module that subclasses :class:`WorkspacePolicy` and registers itself.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

# Accumulation arrays start at the operands' stored values (the capacity hint), between
# these bounds, and double while the merged components outgrow them: more room means
# fewer merges, each of which copies every component so far.
ACC_MIN = 256
ACC_MAX = 1 << 24

_CORE = """\
/* sparse workspace of {T} values (insert-sort-merge): acc takes components (key, value),
   all holds the sorted components with distinct keys, tmp is all's second buffer */
typedef struct {{
  uint64_t *key, *all_key, *tmp_key;
  {T} *val, *all_val, *tmp_val;
  int64_t n, cap, all_n, all_cap, tmp_cap;
  int64_t* crd[COITER_WS_MAX_ORDER];  /* all's coordinates, decoded per level */
  int64_t crd_cap;
  int64_t* used;  /* hash tables: the occupied slots, so a flush costs the entries, not the table */
}} coiter_ws_{N};

/* a (key, value) buffer pair resized to cap entries; nonzero when out of memory (the old
   buffers stay valid) */
static int coiter_ws_resize_{N}(uint64_t** key, {T}** val, int64_t cap) {{
  uint64_t* k = (uint64_t*)coiter_expand(*key, (size_t)cap * sizeof(uint64_t));
  if (!k) return 1;
  *key = k;
  {T}* v = ({T}*)coiter_expand(*val, (size_t)cap * sizeof({T}));
  if (!v) return 1;
  *val = v;
  return 0;
}}

static int coiter_ws_init_{N}(coiter_ws_{N}* w, int64_t hint, int fill) {{
  int64_t cap = {acc_min};
  while (cap < hint && cap < {acc_max}) cap *= 2;
  if (coiter_ws_resize_{N}(&w->key, &w->val, cap)) return 1;
  if (fill) {{
    memset(w->key, 0xff, (size_t)cap * sizeof(uint64_t));
    w->used = (int64_t*)coiter_malloc((size_t)(cap / 2 + 1) * sizeof(int64_t));
    if (!w->used) return 1;
  }}
  w->cap = cap;
  return 0;
}}

static void coiter_ws_free_{N}(coiter_ws_{N}* w) {{
  coiter_free(w->key); coiter_free(w->val); coiter_free(w->all_key); coiter_free(w->all_val);
  coiter_free(w->tmp_key); coiter_free(w->tmp_val); coiter_free(w->used);
  for (int l = 0; l < COITER_WS_MAX_ORDER; l++) coiter_free(w->crd[l]);
}}

/* acc doubles (up to {acc_max} entries) once all outgrows it; `fill` marks the new
   entries empty (hash tables) */
static int coiter_ws_fit_{N}(coiter_ws_{N}* w, int fill) {{
  if (w->all_n <= w->cap || w->cap >= {acc_max}) return 0;
  int64_t cap = w->cap * 2;
  if (coiter_ws_resize_{N}(&w->key, &w->val, cap)) return 1;
  if (fill) {{
    memset(w->key, 0xff, (size_t)cap * sizeof(uint64_t));
    int64_t* used = (int64_t*)coiter_expand(w->used, (size_t)(cap / 2 + 1) * sizeof(int64_t));
    if (!used) return 1;
    w->used = used;
  }}
  w->cap = cap;
  return 0;
}}

/* add up equal neighbours of the sorted key[0..n), in place; the distinct count */
static int64_t coiter_ws_reduce_{N}(uint64_t* key, {T}* val, int64_t n) {{
  if (n == 0) return 0;
  int64_t o = 0;
  for (int64_t q = 1; q < n; q++) {{
    if (key[q] == key[o]) val[o] += val[q];
    else {{ o++; key[o] = key[q]; val[o] = val[q]; }}
  }}
  return o + 1;
}}

/* tmp holds at least n entries (grown to at least twice its capacity) */
static int coiter_ws_tmp_{N}(coiter_ws_{N}* w, int64_t n) {{
  if (n <= w->tmp_cap) return 0;
  int64_t cap = COITER_MAX(n, 2 * w->tmp_cap);
  if (coiter_ws_resize_{N}(&w->tmp_key, &w->tmp_val, cap)) return 1;
  w->tmp_cap = cap;
  return 0;
}}

/* merge the sorted, distinct components (bk, bv)[0..m) into all (equal keys add up),
   through tmp */
static int coiter_ws_merge_from_{N}(coiter_ws_{N}* w, const uint64_t* bk, const {T}* bv, int64_t m) {{
  if (coiter_ws_tmp_{N}(w, w->all_n + m)) return 1;
  const uint64_t *ak = w->all_key;
  const {T} *av = w->all_val;
  uint64_t* ok = w->tmp_key;
  {T}* ov = w->tmp_val;
  int64_t a = 0, b = 0, o = 0, na = w->all_n;
  while (a < na && b < m) {{
    if (ak[a] < bk[b]) {{ ok[o] = ak[a]; ov[o++] = av[a++]; }}
    else if (bk[b] < ak[a]) {{ ok[o] = bk[b]; ov[o++] = bv[b++]; }}
    else {{ ok[o] = ak[a]; ov[o++] = av[a++] + bv[b++]; }}
  }}
  if (a < na) {{
    memcpy(ok + o, ak + a, (size_t)(na - a) * sizeof(uint64_t));
    memcpy(ov + o, av + a, (size_t)(na - a) * sizeof({T}));
    o += na - a;
  }}
  if (b < m) {{
    memcpy(ok + o, bk + b, (size_t)(m - b) * sizeof(uint64_t));
    memcpy(ov + o, bv + b, (size_t)(m - b) * sizeof({T}));
    o += m - b;
  }}
  uint64_t* tk = w->all_key; w->all_key = w->tmp_key; w->tmp_key = tk;
  {T}* tv = w->all_val; w->all_val = w->tmp_val; w->tmp_val = tv;
  int64_t tc = w->all_cap; w->all_cap = w->tmp_cap; w->tmp_cap = tc;
  w->all_n = o;
  return 0;
}}

/* merge the sorted, distinct acc[0..m) into all */
static int coiter_ws_merge_{N}(coiter_ws_{N}* w, int64_t m) {{
  return coiter_ws_merge_from_{N}(w, w->key, w->val, m);
}}

/* add the flushed components of `part` (a thread's own workspace) to all; the first
   non-empty part hands its buffers over without a copy */
static int coiter_ws_absorb_{N}(coiter_ws_{N}* w, coiter_ws_{N}* part) {{
  if (part->all_n == 0) return 0;
  if (w->all_n == 0) {{
    uint64_t* k = w->all_key; w->all_key = part->all_key; part->all_key = k;
    {T}* v = w->all_val; w->all_val = part->all_val; part->all_val = v;
    int64_t c = w->all_cap; w->all_cap = part->all_cap; part->all_cap = c;
    w->all_n = part->all_n;
    part->all_n = 0;
    return 0;
  }}
  return coiter_ws_merge_from_{N}(w, part->all_key, part->all_val, part->all_n);
}}

/* LSD radix sort of (key, value) pairs by the bytes of the keys below 2^bits, through
   the buffers tk/tv; bytes every key shares are skipped */
static void coiter_ws_radix_{N}(uint64_t* key, {T}* val, uint64_t* tk, {T}* tv, int64_t n, int bits) {{
  uint64_t *sk = key, *dk = tk;
  {T} *sv = val, *dv = tv;
  for (int shift = 0; shift < bits; shift += 8) {{
    int64_t count[256] = {{0}};
    for (int64_t q = 0; q < n; q++) count[(sk[q] >> shift) & 255]++;
    if (count[(sk[0] >> shift) & 255] == n) continue;
    for (int64_t d = 0, sum = 0; d < 256; d++) {{ int64_t c = count[d]; count[d] = sum; sum += c; }}
    for (int64_t q = 0; q < n; q++) {{
      int64_t at = count[(sk[q] >> shift) & 255]++;
      dk[at] = sk[q]; dv[at] = sv[q];
    }}
    uint64_t* t = sk; sk = dk; dk = t;
    {T}* u = sv; sv = dv; dv = u;
  }}
  if (sk != key) {{
    memcpy(key, sk, (size_t)n * sizeof(uint64_t));
    memcpy(val, sv, (size_t)n * sizeof({T}));
  }}
}}

/* sort acc[0..m) by radix through tmp */
static int coiter_ws_radix_acc_{N}(coiter_ws_{N}* w, int64_t m, int bits) {{
  if (coiter_ws_tmp_{N}(w, m)) return 1;
  coiter_ws_radix_{N}(w->key, w->val, w->tmp_key, w->tmp_val, m, bits);
  return 0;
}}

/* all's keys as coordinates: level l is (key >> shift[l]) & mask[l] */
static int coiter_ws_decode_{N}(coiter_ws_{N}* w, int order, const int* shift, const uint64_t* mask) {{
  if (w->all_n > w->crd_cap) {{
    for (int l = 0; l < order; l++) {{
      int64_t* c = (int64_t*)coiter_expand(w->crd[l], (size_t)w->all_n * sizeof(int64_t));
      if (!c) return 1;
      w->crd[l] = c;
    }}
    w->crd_cap = w->all_n;
  }}
  for (int l = 0; l < order; l++) {{
    int64_t* restrict c = w->crd[l];
    const uint64_t* restrict k = w->all_key;
    int s = shift[l];
    uint64_t m = mask[l];
    for (int64_t q = 0; q < w->all_n; q++) c[q] = (int64_t)((k[q] >> s) & m);
  }}
  return 0;
}}
"""

PRELUDE = """\
#define COITER_WS_MAX_ORDER {max_order}
/* bits a coordinate below `dim` takes in a workspace key */
static inline int coiter_ws_bits(int64_t dim) {{
  int b = 0;
  while (b < 63 && (INT64_C(1) << b) < dim) b++;
  return b;
}}
"""

MAX_ORDER = 16


class WorkspacePolicy(ABC):
    """How a sparse workspace's accumulation array takes inserts and is sorted.

    A policy's C source defines, for each value type ``{T}`` (suffix ``{N}``),
    ``int coiter_ws_<name>_insert_{N}(coiter_ws_{N}* w, uint64_t key, {T} v, int bits)``
    and ``int coiter_ws_<name>_flush_{N}(coiter_ws_{N}* w, int bits)`` (empties ``acc``
    into ``all``); both return nonzero when memory runs out.
    """

    name: ClassVar[str]
    # whether acc starts with every key marked empty (all bits set): hash tables
    fills: ClassVar[bool] = False

    @abstractmethod
    def c_source(self) -> str:
        """The policy's functions, a template over ``{T}`` and ``{N}``."""

    def insert_fn(self, suffix: str) -> str:
        return f"coiter_ws_{self.name}_insert_{suffix}"

    def flush_fn(self, suffix: str) -> str:
        return f"coiter_ws_{self.name}_flush_{suffix}"


_APPENDING = """\
static int coiter_ws_{name}_flush_{{N}}(coiter_ws_{{N}}* w, int bits) {{{{
  (void)bits;
  if (w->n == 0) return 0;
  {sort}
  int64_t m = coiter_ws_reduce_{{N}}(w->key, w->val, w->n);
  w->n = 0;
  return coiter_ws_merge_{{N}}(w, m) || coiter_ws_fit_{{N}}(w, 0);
}}}}

static inline int coiter_ws_{name}_insert_{{N}}(coiter_ws_{{N}}* w, uint64_t key, {{T}} v, int bits) {{{{
  if (w->n == w->cap && coiter_ws_{name}_flush_{{N}}(w, bits)) return 1;
  w->key[w->n] = key;
  w->val[w->n++] = v;
  return 0;
}}}}
"""


def appending(name: str, sort: str) -> str:
    """Insert and flush (a template over ``{T}``, ``{N}``) of a policy whose accumulation
    array is a list that inserts append to and a flush sorts with the C statement
    ``sort`` (which may return 1 when out of memory), adding up equal keys afterwards."""
    return _APPENDING.format(name=name, sort=sort)


def suffix(ctype: str) -> str:
    """The C identifier suffix of a value type (``double complex`` -> ``double_complex``)."""
    return ctype.replace(" ", "_")


def core_source(ctype: str) -> str:
    """The template's data structure and shared functions for one value type."""
    return _CORE.format(T=ctype, N=suffix(ctype), acc_min=ACC_MIN, acc_max=ACC_MAX)


def prelude() -> str:
    return PRELUDE.format(max_order=MAX_ORDER)
