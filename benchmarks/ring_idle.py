"""Where an 8-rank gloo ring allreduce over the emulated star leaves its links idle (gap 1).

    .venv/bin/python benchmarks/ring_idle.py --rate 100 [--mb 25] [--iters 3] [--cc bbr]
        [--queue 100] [--workers 8] [--json FILE]

Builds the project's star (``testbed.emulation.Emulation``: 8 workers, no cross host, every
access link HTB at ``--rate`` Mbit/s real, pfifo of ``--queue`` packets), starts one bare
gloo rank per worker host (no model: ``torch.distributed.all_reduce`` of an fp32 tensor of
``--mb`` MB, ``--iters`` timed calls after one warm-up) and prints:

- ``eff``: the ring's link-limited bytes (2 (n-1)/n of the tensor per rank) over the timed
  calls' wall time, as a share of the link rate (one TCP flow reaches ~0.957: headers);
- ``idle``: the share of 100 ms samples of the hosts' uplinks (each host's own egress,
  ``/proc/<pid>/net/dev``) that carried less than half the rate, over all hosts;
- per rank, from the kernel's own TCP chronographs (``ss -ti`` before and after the timed
  calls, the socket toward the rank it sends to): how long the socket was ``busy``,
  ``rwnd_limited`` and ``sndbuf_limited`` over the timed window, and its cwnd/rtt at the end.

``--cc`` sets the hosts' congestion control (else the machine's default is inherited),
``--ack-first`` the topology's ``ack_first`` (pure ACKs ahead of data in each host's queue).
Needs root, mnexec, tc; run it under the heavy-work lock.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORKER = r"""
import json, os, subprocess, sys, time
import torch, torch.distributed as dist
import socket, struct, threading
rank, world, n, iters = (int(a) for a in sys.argv[1:5])
peer_ip = sys.argv[5]
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.ones(n)
dist.all_reduce(t)
dist.barrier()
fds = []
for name in os.listdir("/proc/self/fd"):
    try:
        fd = int(name)
        if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
            continue
        s = socket.socket(fileno=os.dup(fd))
        try:
            if (s.type == socket.SOCK_STREAM and s.getpeername()[0] == peer_ip
                    and 29533 not in (s.getpeername()[1], s.getsockname()[1])):
                fds.append(fd)
        except OSError:
            pass
        finally:
            s.close()
    except (OSError, ValueError):
        pass
trace = []
done = threading.Event()
def sample():
    socks = [socket.socket(fileno=os.dup(fd)) for fd in fds]
    while not done.is_set():
        now = time.time()
        for i, s in enumerate(socks):
            raw = s.getsockopt(socket.IPPROTO_TCP, 11, 232)
            cc = s.getsockopt(socket.IPPROTO_TCP, 26, 20)
            u = struct.unpack_from("<B", raw, 1)[0]
            cwnd, = struct.unpack_from("<I", raw, 80); rtt, = struct.unpack_from("<I", raw, 68)
            unacked, = struct.unpack_from("<I", raw, 24)
            pacing, = struct.unpack_from("<Q", raw, 104); acked, = struct.unpack_from("<Q", raw, 120)
            notsent, = struct.unpack_from("<I", raw, 144); dr, = struct.unpack_from("<Q", raw, 160)
            busy, rwl, sbl = struct.unpack_from("<QQQ", raw, 168)
            snd_wnd, = struct.unpack_from("<I", raw, 228)
            gains = struct.unpack_from("<5I", cc) if len(cc) >= 20 else None
            trace.append((now, i, u, cwnd, rtt, unacked, pacing, acked, notsent, dr, busy, rwl, sbl,
                          snd_wnd, gains[3] if gains else None, gains[2] if gains else None))
        done.wait(0.05)
    for s in socks:
        s.close()
th = threading.Thread(target=sample, daemon=True)
th.start()
ss0 = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True).stdout
t0 = time.time(); times = []
for _ in range(iters):
    s = time.perf_counter(); dist.all_reduce(t); times.append(time.perf_counter() - s)
t1 = time.time()
ss1 = subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True).stdout
done.set(); th.join()
dist.barrier()
print(json.dumps({"rank": rank, "t0": t0, "t1": t1, "times": times, "ss0": ss0, "ss1": ss1,
                  "nsock": len(fds), "trace": trace}))
dist.destroy_process_group()
"""

_MS = re.compile(r"\b(busy|rwnd_limited|sndbuf_limited):(\d+)ms")


def _sockets(text: str) -> dict[str, dict]:
    """ss -tinH output -> {peer 'ip:port' side key: fields}; two lines per socket."""
    out = {}
    lines = text.strip().splitlines()
    i = 0
    while i < len(lines):
        head = lines[i].split()
        info = lines[i + 1] if i + 1 < len(lines) else ""
        i += 2
        if len(head) < 4:
            continue
        local, peer = head[2], head[3]
        f = {k: int(v) for k, v in _MS.findall(info)}
        for key in ("cwnd", "bytes_acked", "bytes_sent", "bytes_received", "retrans"):
            m = re.search(rf"\b{key}:(\d+)", info)
            if m:
                f[key] = int(m.group(1))
        m = re.search(r"\brtt:([\d.]+)/([\d.]+)", info)
        if m:
            f["rtt_ms"] = float(m.group(1))
        m = re.search(r"\bminrtt:([\d.]+)", info)
        if m:
            f["minrtt_ms"] = float(m.group(1))
        m = re.search(r"\b(cubic|bbr|reno|bbr2|dctcp)\b", info)
        if m:
            f["cc"] = m.group(1)
        f["info"] = info.strip()
        out[f"{local}>{peer}"] = f
    return out


def _tx_bytes(pid: int, dev: str) -> int:
    for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines():
        line = line.strip()
        if line.startswith(dev + ":"):
            return int(line[len(dev) + 1:].split()[8])
    raise RuntimeError(f"{dev} not in /proc/{pid}/net/dev")


def run(rate: float, mb: float, iters: int, cc: str | None, queue: int, workers: int,
        setup: list[str], post_cmds: list[str] = (), ack_first: bool = False) -> dict:
    from testbed.emulation import Emulation

    emu = Emulation("star", {"n_workers": workers, "n_cross": 0, "rate_mbit": rate,
                             "queue_pkts": queue}, congestion_control=cc,
                    ack_first=ack_first)
    emu.start()
    samples: list[tuple[float, list[int]]] = []
    stop = threading.Event()
    try:
        hosts = emu.worker_hosts
        for cmd in setup:  # e.g. "ip route change ... quickack 1" in every host: {dev} {host}
            for h in hosts:
                argv = ["mnexec", "-a", str(emu.host_pid(h)), "sh", "-c",
                        cmd.format(dev=emu.intf(h), host=h)]
                done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
                if done.returncode != 0:
                    raise RuntimeError(f"setup {cmd!r} on {h}: {done.stderr.strip()}")
        ends = [(emu.host_pid(h), emu.intf(h)) for h in hosts]

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.time(), [_tx_bytes(p, d) for p, d in ends]))
                stop.wait(0.1)

        threading.Thread(target=sample, daemon=True).start()
        n = int(mb * 1e6 / 4)
        env = dict(MASTER_ADDR=emu.ip(hosts[0]), MASTER_PORT="29533", WORLD_SIZE=str(workers),
                   OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
        procs = [emu.popen(h, [sys.executable, "-c", WORKER, str(r), str(workers), str(n),
                               str(iters), emu.ip(hosts[(r - 1) % workers])],
                           env={**env, "GLOO_SOCKET_IFNAME": emu.intf(h), "RANK": str(r)},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for r, h in enumerate(hosts)]
        outs = []
        for p in procs:
            o, e = p.communicate(timeout=600)
            if p.returncode != 0:
                raise RuntimeError(f"worker failed: {e.decode()[-2000:]}")
            outs.append(json.loads(o.decode().strip().splitlines()[-1]))
        ips = {r: emu.ip(h) for r, h in enumerate(hosts)}
        post = {}
        for cmd in post_cmds:  # e.g. "tc -s class show dev {dev}": what the run left behind
            for h in hosts:
                argv = ["mnexec", "-a", str(emu.host_pid(h)), "sh", "-c",
                        cmd.format(dev=emu.intf(h), host=h)]
                post[h] = subprocess.run(argv, capture_output=True, text=True,
                                         timeout=10).stdout
    finally:
        stop.set()
        emu.stop()
    t0 = max(o["t0"] for o in outs)
    t1 = min(o["t1"] for o in outs)
    wall = statistics.median(sum(o["times"]) for o in outs)
    moved = 2 * (workers - 1) / workers * n * 4 * iters  # bytes per rank, link-limited ring
    eff = moved * 8 / (rate * 1e6 * wall)
    win = [s for s in samples if t0 <= s[0] <= t1]
    low = tot = 0
    shares = []
    for (ta, a), (tb, b) in zip(win, win[1:], strict=False):
        for x, y in zip(a, b, strict=True):
            r = (y - x) * 8 / (tb - ta) / (rate * 1e6)
            shares.append(r)
            tot += 1
            low += r < 0.5
    ranks = []
    for o in outs:
        r = o["rank"]
        dst = ips[(r - 1) % workers]  # gloo's ring sends to rank - 1
        a, b = _sockets(o["ss0"]), _sockets(o["ss1"])
        key = [k for k in b if k.split(">")[1].startswith(dst + ":") and
               b[k].get("bytes_acked", 0) - a.get(k, {}).get("bytes_acked", 0) > 1e6]
        if not key:
            ranks.append({"rank": r})
            continue
        k = key[0]
        span_ms = (o["t1"] - o["t0"]) * 1000
        row = {"rank": r, "span_ms": round(span_ms)}
        for f in ("busy", "rwnd_limited", "sndbuf_limited", "retrans"):
            row[f] = b[k].get(f, 0) - a.get(k, {}).get(f, 0)
        for f in ("cwnd", "rtt_ms", "minrtt_ms", "cc"):
            row[f] = b[k].get(f)
        row["info_end"] = b[k]["info"]
        ranks.append(row)
    return {"rate": rate, "mb": mb, "iters": iters, "cc": cc, "queue": queue,
            "ack_first": ack_first,
            "setup": setup, "times": [round(x, 3) for x in outs[0]["times"]],
            "eff": round(eff, 4), "idle": round(low / max(tot, 1), 4),
            "mean_share": round(statistics.mean(shares), 4) if shares else None,
            "ranks": ranks, "post": post, "traces": {o["rank"]: o["trace"] for o in outs}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, required=True, help="real Mbit/s of every link")
    ap.add_argument("--mb", type=float, default=25.0)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--cc", default=None)
    ap.add_argument("--queue", type=int, default=100)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--setup", action="append", default=[],
                    help="shell command run in every worker host first ({dev}, {host})")
    ap.add_argument("--post", action="append", default=[],
                    help="shell command run in every worker host after the calls; kept")
    ap.add_argument("--ack-first", action="store_true",
                    help="topology.ack_first: pure ACKs ahead of data in each host's queue")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    res = run(a.rate, a.mb, a.iters, a.cc, a.queue, a.workers, a.setup, a.post,
              a.ack_first)
    res["label"] = a.label
    busy = [r for r in res["ranks"] if "busy" in r]
    print(f"{a.label:>12} rate {a.rate:g} cc {a.cc or 'default'} q {a.queue}"
          f"{' ack-first' if a.ack_first else ''}: eff "
          f"{res['eff']:.3f} idle {res['idle']:.3f} mean {res['mean_share']} times "
          f"{res['times']}")
    for r in busy:
        print(f"  rank {r['rank']}: span {r['span_ms']} busy {r['busy']} rwnd_lim "
              f"{r['rwnd_limited']} sndbuf_lim {r['sndbuf_limited']} retrans {r['retrans']} "
              f"cwnd {r['cwnd']} rtt {r['rtt_ms']} minrtt {r['minrtt_ms']} {r['cc']}")
    if a.json:
        with open(a.json, "a") as fh:
            fh.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
