"""Time dilation of one run: the factor ``k``, its arithmetic, and how ``auto`` picks it.

A dilated run (Gupta et al., NSDI'06) divides every link rate and cross-traffic cap by
``k`` and multiplies every scheduled time, deadline and timeout by ``k``; the workers read
a clock ``k`` times slower (``netsenseml.clock``), and what the orchestrator records on its
own clock (steps.csv's ``t``, events.csv, bottleneck.csv, the cross traffic's reports)
is divided back, so a run folder holds virtual time and virtual rates throughout, and says
so (``config.json``'s ``accelerator.dilation``). The host then has ``k`` times longer for
each step's real work, and the shaped links, the iperf3 senders and the workers share the
cores at ``1/k`` of the virtual load. The arithmetic is the value's
(``netsenseml.dilation.Dilation``); this module chooses ``k``.

Not dilated: kernel timers other than TCP's minimum RTO (which is set per route to
``200 ms x k`` in every emulated host: :func:`rto_min_ms`) -- delayed ACKs (40 ms minimum),
the HTB shaper's burst (computed at the real rate), and software costs per message (gloo's
~0.15-0.5 ms per collective on loopback) shrink by ``k`` in virtual time.

``auto``: before the run, one ``workloads.host_timing`` per worker runs at once on this host
(the cores shared as in the run) and times the step's parts and the codecs the method can
use; ``k`` is the least factor at which each real part, times the scenario's ``margin``,
fits its profiled slot, and the ranks' CPU work of a whole step fits the cores while they
all compute at once (:func:`least_factor`, the rule ``testbed.config.factor`` shares with
the estimate), rounded up to two significant digits. One measurement per (workload,
codecs, world size, threads), kept in the process and on disk (:func:`cache_dir`) for as
long as the host (:func:`host_id`) and the code the host timing runs (:func:`code_id`) stay the
same, and taken again when the host's load moved by more than ``RECALIBRATE_PCT`` since: a
sweep measures each configuration once on a steady host, the next sweep not at all, and a
busy process that starts beside it gets the next runs a larger factor. In payload mode
(``workload.grads: payload``) nothing real is timed, so no host timing runs: the host's need is
the rule's model of the hook's bookkeeping (``factor.payload_need``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from netsenseml import methods
from netsenseml.dilation import Dilation
from testbed.common import files
from testbed.config import factor, faithful  # factor: the rule, shared with the estimate
from testbed.config.factor import codec_specs, timing_key
from testbed.orchestration.hostload import cpu_times
from workloads import registry

#: Linux's TCP minimum retransmission timeout (TCP_RTO_MIN), and its maximum.
RTO_MIN_MS = 200.0
RTO_MAX_MS = 120_000.0
TIMING_TIMEOUT_S = 180.0

_cache: dict[tuple, tuple[dict[str, Any], float, str | None]] = {}


class DilationError(RuntimeError):
    """The automatic factor could not be measured; ``str()`` is one line."""


def topology_params(params: dict[str, Any], dilation: Dilation | float) -> dict[str, Any]:
    """The topology's build parameters with every rate (``*_mbit``) at its real rate."""
    d = Dilation.of(dilation)
    if not d.dilated:
        return params
    return {name: (d.real_mbit(v) if name.endswith("_mbit") and isinstance(v, int | float)
                   and not isinstance(v, bool) else v) for name, v in params.items()}


def rto_min_ms(dilation: Dilation | float) -> float:
    """TCP's minimum RTO dilated with the rest (at most the kernel's maximum)."""
    return min(Dilation.of(dilation).real_s(RTO_MIN_MS), RTO_MAX_MS)


def virtual_reports(reports: list[dict[str, Any]],
                    dilation: Dilation | float) -> list[dict[str, Any]]:
    """iperf3 flow reports (``testbed.emulation.traffic.reports``) in virtual units."""
    d = Dilation.of(dilation)
    if not d.dilated:
        return reports
    out = []
    for r in reports:
        r = dict(r)
        for key in ("achieved_mbit", "received_mbit"):
            if isinstance(r.get(key), int | float):
                r[key] = round(d.virtual_mbit(r[key]), 3)
        for key in ("seconds", "started_t"):
            if isinstance(r.get(key), int | float):
                r[key] = round(d.virtual_s(r[key]), 4)
        for key in ("intervals", "received_intervals"):
            if isinstance(r.get(key), list):
                r[key] = [(round(d.virtual_s(a), 4), round(d.virtual_s(b), 4),
                           round(d.virtual_mbit(m), 3)) for a, b, m in r[key]]
        out.append(r)
    return out


def host_timing_s_in(accelerator: dict[str, Any]) -> float | None:
    """The host timing's real seconds before a run, from its config.json's ``accelerator``
    record: ``host_timing_s``, or ``probe_s`` in runs recorded before issue 51 named it so;
    None where neither was recorded."""
    for key in ("host_timing_s", "probe_s"):
        if accelerator.get(key) is not None:
            return float(accelerator[key])
    return None


def measure(scn: Any, method: methods.MethodSpec) -> dict[str, Any]:
    """One ``workloads.host_timing`` per worker at once; the slowest of their medians."""
    wl = scn.workload
    return measure_workload(wl.model, wl.dataset, wl.batch_size, wl.knobs(),
                            codec_specs(method), scn.world_size, wl.threads,
                            grads=wl.grads, context=wl.arg("context"))


def measure_workload(model: str, dataset: str, batch_size: int, knobs: dict[str, Any],
                     codecs: list[str], processes: int, threads: int = 1,
                     steps: int = 12, grads: str = "real",
                     context: Any = None) -> dict[str, Any]:
    """``processes`` copies of ``workloads.host_timing`` at once, each on ``threads``
    threads, their timed steps overlapping (the cores shared as in a run of that many
    workers); the slowest copy's median of each part."""
    argv = [sys.executable, "-m", "workloads.host_timing", "--model", model,
            "--dataset", dataset, "--batch-size", str(batch_size),
            "--model-args", ",".join(f"{k}={v}" for k, v in knobs.items()),
            "--codecs", ",".join(codecs), "--world", str(processes),
            "--threads", str(threads), "--steps", str(steps), "--grads", grads]
    if context is not None:  # the language model's context sets its step's cost
        argv += ["--context", str(context)]
    env = {**os.environ, "NETSENSE_DILATION": "1"}
    procs = [subprocess.Popen([*argv, "--barrier"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for _ in range(processes)]
    results = []
    try:
        for p in procs:  # all warm before any times a step (their imports would weigh in)
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                break
        for p in procs:
            try:
                p.stdin.write("go\n")  # type: ignore[union-attr]
                p.stdin.flush()  # type: ignore[union-attr]
            except OSError:
                pass
        for p in procs:
            out, err = p.communicate(timeout=TIMING_TIMEOUT_S)
            if p.returncode != 0:
                last = (err.strip().splitlines() or ["no output"])[-1]
                raise DilationError(f"dilation auto: the host's step could not be timed: {last}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    except subprocess.TimeoutExpired:
        raise DilationError(f"dilation auto: timing the host's step took over "
                            f"{TIMING_TIMEOUT_S:g} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return _worst(results, threads)


def _worst(results: list[dict[str, Any]], threads: int) -> dict[str, Any]:
    """The slowest copy's figure of each part, and the sharing they were measured under."""
    worst: dict[str, Any] = {k: max(r[k] for r in results)
                             for k in ("forward_s", "backward_s", "optimizer_s", "between_s",
                                       "step_cpu_s")
                             if all(k in r for r in results)}
    worst["elements"] = results[0]["elements"]
    for key in ("codec_s", "codec_cpu_s"):
        if all(key in r for r in results):
            worst[key] = {lv: max(r[key][lv] for r in results) for lv in results[0][key]}
    worst["processes"] = len(results)
    worst["threads"] = threads
    worst["cores"] = len(os.sched_getaffinity(0))
    return worst


def choose(scn: Any, method: methods.MethodSpec) -> tuple[float, dict[str, Any]]:
    """``(k, facts)`` for this run: 1 for a native run, the scenario's number, or ``auto``:
    in payload mode the rule alone (nothing real is timed), otherwise measured on this host,
    once per configuration while the host, the code and the host's load stay (cached in
    this process and on disk: :func:`cache_dir`). In ``facts``: ``host_timing_s``, the real
    seconds the host timing took before this run (0 when cached), and ``host_timing_cached``,
    when a cached one was taken (older runs' records name them ``probe_s`` and
    ``probe_cached``: :func:`host_timing_s_in` reads both)."""
    acc = scn.accelerator
    if acc is None:
        return 1.0, {"mode": "native"}
    wl = scn.workload
    timing = acc.timing(wl.model, wl.knobs(), wl.batch_size)
    facts: dict[str, Any] = {"mode": "paced", "timing": timing.to_json(),
                             "profile": acc.profile, "step_ms": acc.step_ms}
    if acc.dilation != "auto":
        return float(acc.dilation), {**facts, "dilation_source": "given"}
    if wl.grads == "payload":  # nothing real is timed: no host timing (testbed.config.factor)
        elements = registry.param_count(wl.model, wl.knobs(), wl.dataset) or 0
        cores = len(os.sched_getaffinity(0))
        rates = faithful.training_rates(scn.model_dump(mode="json"))
        k_host = factor.payload_factor(timing, elements, scn.world_size, cores, acc.margin,
                                       wl.threads, acc.max_overrun, rates, method)
        k_net = network_factor(scn)
        return max(k_host, k_net), {**facts, "dilation_source": "auto", "host_timing_s": 0.0,
                                    "margin": acc.margin, "k_host": k_host, "k_network": k_net,
                                    "host_rule": "payload", "host_busy_pct": round(host_busy_pct(), 1)}
    # what the host timing measures depends on these, not on the profile or the margin
    key = timing_key(scn, method)
    busy = host_busy_pct()
    cached = _cache.get(key) or _load_cached(key)
    timing_s = 0.0
    if cached is None or abs(cached[1] - busy) > RECALIBRATE_PCT:
        t = time.monotonic()
        real = measure(scn, method)
        timing_s = round(time.monotonic() - t, 1)
        cached = (real, busy, None)
        _store(key, real, busy)
    _cache[key] = cached
    real, busy_then, cached_at = cached
    k_host = factor.least_factor(timing, real, acc.margin)
    k_net = network_factor(scn)
    return max(k_host, k_net), {**facts, "dilation_source": "auto", "host_real_s": real,
                                "host_timing_s": timing_s, "host_timing_cached": cached_at,
                                "margin": acc.margin, "k_host": k_host, "k_network": k_net,
                                "host_busy_pct": round(busy, 1),
                                "host_busy_pct_at_measure": round(busy_then, 1)}


#: Where ``auto``'s measurements persist between processes, one file per configuration;
#: ``NETSENSE_CACHE`` names another folder (an empty value: no cache on disk).
CACHE_ENV = "NETSENSE_CACHE"


def cache_dir() -> Path | None:
    raw = os.environ.get(CACHE_ENV)
    if raw is not None:
        return Path(raw) if raw.strip() else None
    return Path.home() / ".cache" / "netsense" / "dilation"


def host_id() -> dict[str, Any]:
    """What makes a measurement this host's: a change of any invalidates it."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"node": platform.node(), "cpu": model, "cores": len(os.sched_getaffinity(0)),
            "memory_kb": _mem_total_kb()}


def _mem_total_kb() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


@functools.cache
def code_id() -> str:
    """A digest of the code the host timing runs (the library and the worker): a change of any of
    it invalidates every measurement taken before."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]
    for package in ("netsenseml", "workloads"):
        for path in sorted((root / package).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _cache_file(key: tuple) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    return folder / (hashlib.sha256(repr(key).encode()).hexdigest()[:20] + ".json")


def _load_cached(key: tuple) -> tuple[dict[str, Any], float, str] | None:
    """A measurement of ``key`` on this host with this code, taken by an earlier process."""
    path = _cache_file(key)
    data = None if path is None else files.read_json(path)
    if not data or data.get("key") != repr(key) or data.get("host") != host_id() \
            or data.get("code") != code_id() or not isinstance(data.get("real"), dict):
        return None
    return data["real"], float(data.get("busy_pct", 0.0)), str(data.get("measured_at"))


def is_cached(key: tuple) -> bool:
    """Whether this host holds ``auto``'s measurement of ``key`` (the next run pays no host timing,
    unless the host's load moved: the estimate does not guess that)."""
    return key in _cache or _load_cached(key) is not None


def _store(key: tuple, real: dict[str, Any], busy: float) -> None:
    path = _cache_file(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_json(path, {"key": repr(key), "host": host_id(), "code": code_id(),
                                "real": real, "busy_pct": busy,
                                "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")})
    except OSError:  # a read-only home: the measurement still serves this process
        pass


#: ``auto`` measures the host again when its load (busy % of all cores, outside any run)
#: moved by more than this since the cached measurement: a busy process that started
#: beside a sweep gets a larger factor from the next run on.
RECALIBRATE_PCT = 20.0


def host_busy_pct(seconds: float = 0.5) -> float:
    """How busy the host's cores are now (percent of all cores, over ``seconds``)."""
    busy0, total0 = cpu_times()
    time.sleep(seconds)
    busy, total = cpu_times()
    return 100.0 * (busy - busy0) / (total - total0) if total > total0 else 0.0


def network_factor(scn: Any) -> float:
    """The least ``k`` that brings every rate training crosses into the emulation's faithful
    range (``testbed.config.faithful``): a virtual 40 Gbit/s link at k = 40 is a real
    1 Gbit/s one."""
    rates = faithful.training_rates(scn.model_dump(mode="json"))
    return factor.rate_factor(max(rates, default=0.0))
