"""Which sizes crash OpenBLAS's threaded ?syrk, the kernel its threaded potrf / potri call on the
trailing matrix: one child process per size, each reporting ok or the signal it died of. This is
why `linrec.models.linalg.spd_inverse` gives the threaded LAPACK path only rows of at most
LAPACK_SAFE_ROW_BYTES and takes its recursive path beyond (the module's docstring).

    python experiments/benchmarks/bench_openblas_probe.py [--sizes N ...] [--dtypes float32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_script

#: BLAS threads of the probe (0: BLAS default); set from --threads
THREADS = 0


#: sizes of --probe-openblas (the overflow is expected from ~124 KB per row: module linalg)
PROBE_SIZES = {"float64": [8_000, 14_000, 16_000, 18_000, 20_000],
               "float32": [16_000, 24_000, 30_000, 34_000, 41_000]}


def probe_worker(args: argparse.Namespace) -> dict:
    """One threaded ?syrk C (n x n, lower) = A Aᵀ, A n x 512: what OpenBLAS's threaded potrf
    does to the trailing matrix. Crashes (SIGSEGV) when OpenBLAS's packing buffer overflows."""
    from scipy.linalg import blas

    from linrec.models.linalg import blas_threads

    n, dtype = args.n_items, args.dtype
    a = np.ones((n, 512), dtype=dtype, order="F")
    c = np.zeros((n, n), dtype=dtype, order="F")
    syrk = blas.get_blas_funcs("syrk", (a,))
    start = time.perf_counter()
    with blas_threads(args.threads or None):
        syrk(1.0, a, beta=0.0, c=c, lower=1, overwrite_c=1)
    return {"seconds": time.perf_counter() - start, "ok": bool(c[n - 1, 0] == 512.0)}


def run_probe(sizes: list[int] | None, dtypes: list[str]) -> None:
    from linrec.models.linalg import LAPACK_SAFE_ROW_BYTES, available_memory_bytes

    print("OpenBLAS threaded ?syrk (n x n output, k = 512), one child process each; "
          f"spd_inverse gives threaded potrf/potri at most {LAPACK_SAFE_ROW_BYTES} bytes per row")
    for dtype in dtypes:
        for n in sizes or PROBE_SIZES[dtype]:
            row = n * np.dtype(dtype).itemsize
            if available_memory_bytes() < n * n * np.dtype(dtype).itemsize + (1 << 30):
                print(f"{dtype:>7} n={n:>6} ({row / 1024:5.0f} KiB/row): skipped (memory)")
                continue
            argv = ["--worker", "probe_syrk", "--n-items", str(n), "--dtype", dtype,
                    "--threads", str(THREADS)]
            try:
                out = run_script(__file__, argv, timeout=900)
                status = ("ok" if out.returncode == 0 else
                          f"CRASHED (exit {out.returncode}, signal {-out.returncode})"
                          if out.returncode < 0 else f"FAILED (exit {out.returncode})")
            except subprocess.TimeoutExpired:
                status = "timed out"
            print(f"{dtype:>7} n={n:>6} ({row / 1024:5.0f} KiB/row): {status}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="*", default=None)
    parser.add_argument("--dtypes", nargs="*", default=["float32", "float64"])
    parser.add_argument("--threads", type=int, default=0, help="BLAS threads (0: all cores)")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--n-items", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float64", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global THREADS
    if args.worker:
        print(json.dumps(probe_worker(args)))
        return
    THREADS = args.threads
    run_probe(args.sizes, args.dtypes)


if __name__ == "__main__":
    main()
