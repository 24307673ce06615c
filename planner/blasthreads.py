"""One BLAS thread for a planner command-line process, asked for before numpy is imported.

numpy's OpenBLAS starts one thread per core when numpy is imported; on the 2-core CI machine that start costs
about 0.07 CPU s of every ``sailor-plan`` run (docs/PLANNER.md 2.3, Session 18). The planner has no use for
them: its numpy work is element-wise or on integers, save a few small float products in the mixed-plan search
(``--mixed-plans``), and with one thread their rounding cannot depend on the machine's core count either. A
value the user set is kept.
"""
from __future__ import annotations

import os
import sys

BLAS_THREADS_VAR = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> bool:
    """Ask OpenBLAS for one thread unless numpy is already imported (then it is too late) or the user chose;
    True when this call set it."""
    if "numpy" in sys.modules or BLAS_THREADS_VAR in os.environ:
        return False
    os.environ[BLAS_THREADS_VAR] = "1"
    return True
