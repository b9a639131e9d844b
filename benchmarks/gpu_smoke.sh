#!/usr/bin/env bash
# GPU smoke in the emulation: 2 workers on the smoke scenario with NCCL (one GPU each), then
# the byte-conservation figures of the run (summary.json network.bytes): link bytes next to
# the bytes the hook counted. Ratios near 1 (2 workers) mean NCCL's traffic crossed the
# shaped veth links; near 0 means it went around them (shared memory, P2P, another NIC).
#
#   benchmarks/gpu_smoke.sh [OUT_DIR]
#
# Needs root (or the rootless mode), a GPU, and the testbed installed (make setup). With one
# GPU it runs gloo on CUDA tensors instead (NCCL needs a distinct GPU per worker); without a
# GPU it exits 2 and says so. Not part of `make test`: no GPU on the CI machines.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then  # the comment above is the help
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${1:-$(mktemp -d /tmp/netsense-gpu-smoke.XXXXXX)}
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_smoke: no GPU here (nvidia-smi not found); the NCCL path stays unverified" >&2
  exit 2
fi
N=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
if [ "$N" -lt 1 ]; then
  echo "gpu_smoke: no GPU here (nvidia-smi lists none); the NCCL path stays unverified" >&2
  exit 2
fi
if [ "$N" -ge 2 ]; then BACKEND=nccl; else
  BACKEND=gloo
  echo "gpu_smoke: $N GPU: NCCL needs one GPU per worker; running gloo on CUDA tensors" >&2
fi
"$PY" -m testbed.cli run smoke -m allreduce -m "topk:0.01" --out "$OUT" -q \
  --set workload.device=cuda --set "workload.backend=$BACKEND" || true
"$PY" - "$OUT" "$BACKEND" <<'PYEOF'
import json, sys
from pathlib import Path

out, backend = Path(sys.argv[1]), sys.argv[2]
runs = sorted(out.glob("*/*/summary.json"))
if not runs:
    sys.exit("gpu_smoke: no run folder was written")
bad = 0
for p in runs:
    s = json.loads(p.read_text())
    net = s.get("network", {}).get("bytes", {})
    print(f"{s.get('method')}: status {s.get('status')} backend {backend} "
          f"byte conservation {net.get('status')}  {s.get('reason') or ''}")
    for r in net.get("ranks", []):
        print(f"  rank {r['rank']} {r['intf']}: link tx {r['tx_bytes']} B rx {r['rx_bytes']} B"
              f"  hook {r['hook_bytes']} B  ratio {r['ratio_tx']}  band "
              f"[{r['band_low']}, {r['band_high']}]  ok {r['ok']}")
    for w in s.get("warnings", []):
        print(f"  WARNING: {w}")
    bad += s.get("status") != "ok" or net.get("status") != "ok"
print(f"run folders: {out}")
sys.exit(1 if bad else 0)
PYEOF
