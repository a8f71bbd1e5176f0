"""Bucket policy: inserts append; a full list is bucket-sorted by the keys' bytes (LSD radix).

Like the coordinate list, duplicates are added up when the list is sorted; the sort
costs a pass per byte of the key instead of a comparison sort's ``n log n``, which pays
on large accumulation arrays.
"""
from __future__ import annotations

from .base import WorkspacePolicy, appending


class Bucket(WorkspacePolicy):
    name = "bucket"

    def c_source(self) -> str:
        return appending(self.name, "if (coiter_ws_radix_acc_{N}(w, w->n, bits)) return 1;")
