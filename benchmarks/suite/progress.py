"""A progress bar: tqdm when installed, otherwise one plain line per step."""
from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    def __init__(self, total: int, desc: str, initial: int = 0) -> None:
        self.total, self.desc, self.done = total, desc, initial
        self.start = time.perf_counter()
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar: Any = None
        else:
            self.bar = tqdm(total=total, desc=desc, unit="case", file=sys.stderr, initial=initial,
                            dynamic_ncols=True, mininterval=0.5)

    def step(self, label: str) -> None:
        """Mark the step ``label`` done."""
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(1)
        else:
            elapsed = time.perf_counter() - self.start
            print(f"{self.desc}: [{self.done}/{self.total}] {elapsed:6.0f} s  {label}",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
