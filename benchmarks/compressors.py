"""Compressor speed / size / error on this CPU (``make bench``).

For 1M and 10M float32 elements (Gaussian, a stand-in for a gradient bucket) prints, per
method: compress+decompress time (best of ``--reps``: on a shared machine the minimum is the
least disturbed estimate), compress time alone, bytes on the
wire relative to fp32, and relative L2 error ``|x - D(C(x))| / |x|``. Then checks the
target: sampled top-k (``dgc:0.01``'s selector) at least 4x faster than exact ``torch.topk``
(``topk:0.01``) while keeping at least 90% of the exact top-k's L2 mass.

Also prints netsenseml's own top-k (``method="auto"``: the sampled selector while it keeps
90 % of the exact top-k's L2 mass, checked every 50 calls) and int8 against one memory pass.

Usage: ``python benchmarks/compressors.py [--sizes 1000000 10000000] [--reps 5] [--threads 1]``
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netsenseml import compress  # noqa: E402

METHODS = ["none", "fp16", "bf16", "int8", "topk:0.01", "dgc:0.01", "randomk:0.01", "topk:0.1", "dgc:0.1"]


def timed(fn, reps: int) -> tuple[float, object]:
    fn()  # warm-up: allocations, work buffers
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 = one core)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), best of {args.reps} runs (min: the least disturbed by other load)")
    ok = True
    for n in args.sizes:
        x = torch.randn(n, generator=torch.Generator().manual_seed(0))
        print(f"\n{n:,} float32 elements")
        print(f"{'method':<14}{'comp+dec ms':>12}{'comp ms':>10}{'bytes ratio':>13}{'rel. error':>12}")
        for spec in METHODS:
            c = compress.get(spec)
            t_c, p = timed(lambda c=c, x=x: c.compress(x), args.reps)
            t_cd, y = timed(lambda c=c, x=x: c.decompress(c.compress(x)), args.reps)
            err = float((x - y).norm() / x.norm())
            print(f"{spec:<14}{t_cd * 1e3:>12.2f}{t_c * 1e3:>10.2f}{p.nbytes / (4 * n):>13.4f}{err:>12.4f}")
        for r in (0.01, 0.1):  # netsenseml's top-k: the sampled selector while it keeps 90 %
            c = compress.TopKCompressor(r, method="auto")
            t_c, p = timed(lambda c=c, x=x: c.compress(x), args.reps)
            t_cd, y = timed(lambda c=c, x=x: c.decompress(c.compress(x)), args.reps)
            err = float((x - y).norm() / x.norm())
            sel = "sampled" if c._use_sampled else "exact"
            print(f"{'auto:' + str(r):<14}{t_cd * 1e3:>12.2f}{t_c * 1e3:>10.2f}{p.nbytes / (4 * n):>13.4f}"
                  f"{err:>12.4f}  ({sel}; mass {c.mass_ratio:.3f} of exact at its last check)")
        one_pass = timed(lambda x=x: x.mul(1.0), args.reps)[0]
        q = compress.get("int8")
        t_q = timed(lambda q=q, x=x: q.decompress(q.compress(x)), args.reps)[0]
        print(f"one pass over the tensor (x * 1.0): {one_pass * 1e3:.2f} ms; int8 comp+dec "
              f"{t_q * 1e3:.2f} ms = {t_q / one_pass:.1f} passes")
        # The target, measured in pairs (exact, sampled) so that both see the same load.
        exact, fast = compress.get("topk:0.01"), compress.get("dgc:0.01")
        te, ts, masses = [], [], []
        for _ in range(max(args.reps, 11)):
            t0 = time.perf_counter()
            pe = exact.compress(x)
            t1 = time.perf_counter()
            ps = fast.compress(x)
            t2 = time.perf_counter()
            te.append(t1 - t0)
            ts.append(t2 - t1)
            masses.append(float(ps.tensors[0].pow(2).sum() / pe.tensors[0].pow(2).sum()))
        speed, mass = min(te) / min(ts), min(masses)
        hit = speed >= 4 and mass >= 0.9
        ok &= hit
        print(
            f"target @R=0.01: exact {min(te) * 1e3:.2f} ms, sampled {min(ts) * 1e3:.2f} ms "
            f"-> {speed:.1f}x; L2 mass kept (worst run) {mass:.3f} of exact "
            f"-> {'MET' if hit else 'NOT MET'} (>=4x, >=0.90)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
