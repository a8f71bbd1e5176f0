"""Bucket policy: inserts append; a full list is bucket-sorted by the keys' bytes (LSD radix).

Like the coordinate list, duplicates are added up when the list is sorted; the sort
costs a pass per byte of the key instead of a comparison sort's ``n log n``, which pays
on large accumulation arrays.
"""
from __future__ import annotations

from .base import WorkspacePolicy


class Bucket(WorkspacePolicy):
    name = "bucket"

    def c_source(self) -> str:
        return """\
static int coiter_ws_bucket_flush_{N}(coiter_ws_{N}* w, int bits) {{
  if (w->n == 0) return 0;
  if (coiter_ws_radix_acc_{N}(w, w->n, bits)) return 1;
  int64_t m = coiter_ws_reduce_{N}(w->key, w->val, w->n);
  w->n = 0;
  return coiter_ws_merge_{N}(w, m) || coiter_ws_fit_{N}(w, 0);
}}

static inline int coiter_ws_bucket_insert_{N}(coiter_ws_{N}* w, uint64_t key, {T} v, int bits) {{
  if (w->n == w->cap && coiter_ws_bucket_flush_{N}(w, bits)) return 1;
  w->key[w->n] = key;
  w->val[w->n++] = v;
  return 0;
}}
"""
