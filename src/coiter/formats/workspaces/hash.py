"""Hash policy: an open-addressing table adds up duplicates as they are inserted.

The table (linear probing, a multiplicative hash of the key, all bits set marks an empty
slot) is flushed when half full: its entries are packed to the front, radix sorted and
merged. It wins when many products share a coordinate, without the dense workspace's
memory (the paper's best policy for middle ranks in Table 3).
"""
from __future__ import annotations

from .base import WorkspacePolicy


class Hash(WorkspacePolicy):
    name = "hash"
    fills = True

    def c_source(self) -> str:
        return """\
static int coiter_ws_hash_flush_{N}(coiter_ws_{N}* w, int bits) {{
  if (w->n == 0) return 0;
  int64_t m = 0;
  for (int64_t s = 0; s < w->cap; s++) {{
    if (w->key[s] != UINT64_MAX) {{ w->key[m] = w->key[s]; w->val[m++] = w->val[s]; }}
  }}
  if (coiter_ws_radix_acc_{N}(w, m, bits) || coiter_ws_merge_{N}(w, m)) return 1;
  w->n = 0;
  int64_t cap = w->cap;
  if (coiter_ws_fit_{N}(w, 1)) return 1;
  if (w->cap == cap) memset(w->key, 0xff, (size_t)cap * sizeof(uint64_t));
  return 0;
}}

static inline int coiter_ws_hash_insert_{N}(coiter_ws_{N}* w, uint64_t key, {T} v, int bits) {{
  if (2 * (w->n + 1) > w->cap && coiter_ws_hash_flush_{N}(w, bits)) return 1;
  uint64_t mask = (uint64_t)w->cap - 1;
  uint64_t s = (key * UINT64_C(0x9E3779B97F4A7C15)) >> 32 & mask;
  while (w->key[s] != key) {{
    if (w->key[s] == UINT64_MAX) {{
      w->key[s] = key; w->val[s] = v; w->n++;
      return 0;
    }}
    s = (s + 1) & mask;
  }}
  w->val[s] += v;
  return 0;
}}
"""
