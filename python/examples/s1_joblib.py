"""The joblib report (S1): "memory stays high after I delete the results".

The program as its author wrote it: 4,000 tasks on two workers, each returning an
array of 50,000 doubles (1.5 GiB of results); after ``del`` and ``gc.collect()`` the
process still holds most of it. With ``--fixed``, the two lines marked below make every
``Parallel`` call a phase, and the memory goes back at ``del``.

    python examples/s1_joblib.py            # glibc: hundreds of MiB left
    python examples/s1_joblib.py --fixed    # arenapool: back to the start
"""

import gc
import sys
import time

import numpy as np
from joblib import Parallel, delayed

if "--fixed" in sys.argv:
    import arenapool.joblib  # the fix: these two lines

    arenapool.joblib.install()


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def process(i: int) -> np.ndarray:
    return np.ones(50_000) * i


start = rss_mib()
began = time.perf_counter()
results = Parallel(n_jobs=2)(delayed(process)(i) for i in range(4000))
took = time.perf_counter() - began
held = rss_mib()
del results
gc.collect()
print(f"RSS at start {start:.0f} MiB, with the results {held:.0f} MiB, after del {rss_mib():.0f} MiB"
      f" (Parallel took {took:.2f} s)")
