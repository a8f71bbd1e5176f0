"""Hash policy: an open-addressing table adds up duplicates as they are inserted.

The table (linear probing, a multiplicative hash of the key, all bits set marks an empty
slot, the occupied slots listed) is flushed when half full: its entries are radix sorted
and merged, at a cost that follows the entries, not the table (a row workspace flushes
once per row). It wins when many products share a coordinate, without the dense workspace's
memory (the paper's best policy for middle ranks in Table 3).
"""
from __future__ import annotations

from .base import WorkspacePolicy


class Hash(WorkspacePolicy):
    name = "hash"
    fills = True

    def c_source(self) -> str:
        return """\
/* the occupied slots move to tmp (emptying them), then to the table's first slots, where
   they are sorted and merged like an appended list; those slots are emptied again */
static int coiter_ws_hash_flush_{N}(coiter_ws_{N}* w, int bits) {{
  int64_t m = w->n;
  if (m == 0) return 0;
  if (coiter_ws_tmp_{N}(w, m)) return 1;
  for (int64_t q = 0; q < m; q++) {{
    int64_t s = w->used[q];
    w->tmp_key[q] = w->key[s]; w->tmp_val[q] = w->val[s];
    w->key[s] = UINT64_MAX;
  }}
  memcpy(w->key, w->tmp_key, (size_t)m * sizeof(uint64_t));
  memcpy(w->val, w->tmp_val, (size_t)m * sizeof({T}));
  if (coiter_ws_radix_acc_{N}(w, m, bits) || coiter_ws_merge_{N}(w, m)) return 1;
  memset(w->key, 0xff, (size_t)m * sizeof(uint64_t));
  w->n = 0;
  return coiter_ws_fit_{N}(w, 1);
}}

static inline int coiter_ws_hash_insert_{N}(coiter_ws_{N}* w, uint64_t key, {T} v, int bits) {{
  if (2 * (w->n + 1) > w->cap && coiter_ws_hash_flush_{N}(w, bits)) return 1;
  uint64_t mask = (uint64_t)w->cap - 1;
  uint64_t s = (key * UINT64_C(0x9E3779B97F4A7C15)) >> 32 & mask;
  while (w->key[s] != key) {{
    if (w->key[s] == UINT64_MAX) {{
      w->key[s] = key; w->val[s] = v; w->used[w->n++] = (int64_t)s;
      return 0;
    }}
    s = (s + 1) & mask;
  }}
  w->val[s] += v;
  return 0;
}}
"""
