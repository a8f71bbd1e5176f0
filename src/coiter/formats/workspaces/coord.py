"""Coordinate-list policy: inserts append; a full list is sorted by comparison (quicksort).

Duplicates are only added up when the list is sorted, so this policy wins when few
products share a coordinate (the paper's best policy for small ranks in Table 3).
"""
from __future__ import annotations

from .base import WorkspacePolicy, appending


class Coord(WorkspacePolicy):
    name = "coord"

    def c_source(self) -> str:
        return _QSORT + appending(self.name, "coiter_ws_qsort_{N}(w->key, w->val, w->n);")


_QSORT = """\
/* quicksort of (key, value) pairs by key (median of three, the smaller side recursed),
   short ranges by insertion sort */
static void coiter_ws_qsort_{N}(uint64_t* key, {T}* val, int64_t n) {{
  while (n > 16) {{
    uint64_t x = key[0], y = key[n / 2], z = key[n - 1];
    uint64_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    int64_t i = 0, j = n - 1;
    for (;;) {{
      while (key[i] < p) i++;
      while (key[j] > p) j--;
      if (i >= j) break;
      uint64_t tk = key[i]; key[i] = key[j]; key[j] = tk;
      {T} tv = val[i]; val[i] = val[j]; val[j] = tv;
      i++; j--;
    }}
    if (j + 1 < n - j - 1) {{ coiter_ws_qsort_{N}(key, val, j + 1); key += j + 1; val += j + 1; n -= j + 1; }}
    else {{ coiter_ws_qsort_{N}(key + j + 1, val + j + 1, n - j - 1); n = j + 1; }}
  }}
  for (int64_t i = 1; i < n; i++) {{
    uint64_t k = key[i]; {T} v = val[i]; int64_t j = i - 1;
    while (j >= 0 && key[j] > k) {{ key[j + 1] = key[j]; val[j + 1] = val[j]; j--; }}
    key[j + 1] = k; val[j + 1] = v;
  }}
}}

"""
