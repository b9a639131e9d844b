"""DDP communication hooks: fixed compression methods and the NetSenseML adaptive method.

Usage, in any PyTorch DDP job (gloo or NCCL, with or without the testbed)::

    from netsenseml import hooks
    state = hooks.register(ddp_model, "netsenseml")   # or "allreduce", "fp16", "topk:0.01", ...
    state = hooks.register(ddp_model, "my_pkg.codecs:SignSGD")   # a plug-in (PLUGINS.md)
    ...
    optimizer.step()
    stats = state.pop_step_stats()                    # bytes_sent, comm_s, kept_ratio, level, ...
    hooks.report(samples=len(x), loss=loss.item())   # what only the job knows (testbed records)

``hooks.register(ddp_model)`` with no method takes the run's method when the testbed started
the job (``netsense run`` of a scenario whose workload is a command; ``netsenseml.job``), and
``allreduce`` otherwise; under the testbed the hook also writes the run's per-step records.

The algorithm, once
-------------------
DDP hands each gradient bucket (a flat fp32 buffer of local, not yet averaged, gradients)
to the hook in bucket-index order; the hook returns a future of the averaged buffer. For a
bucket the hook

1. adds the error-feedback residual of that bucket (lossy methods; ``netsenseml.memory``),
2. compresses the result (``netsenseml.compress``) and keeps ``compensated - sent`` as the
   new residual,
3. communicates (``netsenseml.comm``): summable payloads (fp32, fp16/bf16, random-k values
   under a shared seed) are allreduced; per-rank payloads (int8 with its own scale, top-k
   values + indices) are all-gathered, variable sizes handled without truncation,
4. decodes, sums over ranks and divides by the world size (the mean, like DDP's default),
5. counts the bytes of every tensor handed to torch.distributed and the time collectives
   are in flight, and gives each collective to the network monitor as a sample
   (``netsenseml.monitor``).

Error feedback across level switches (``netsenseml``): a dense level (none, fp16/bf16,
int8) adds the residual that sparse steps left at a bounded rate (at most
``residual_drain`` x the gradient's norm per step; the rest is carried), so a switch from
top-k to fp16 does not send many steps' worth of withheld gradient at once, and the cast
levels keep their own rounding error as residual.

``netsenseml`` and ``netsenseml-paper`` (the adaptive methods) add a step loop around this
(``netsenseml.loop``, the one the replay and the simulation drive too; the hook's state and
its parts are ``netsenseml.state``).
Bucket 0 opens a step. At that moment each rank knows the previous step completely: its
period (time between the two bucket-0 calls), its comm time, its exposed comm time (last
collective completion minus the last collective's launch, i.e. what the step waited for
after its last bucket was compressed) and so its compute time (period minus exposed comm),
its codec time, its bytes and collectives, the time from its first to its last launch
(where communication can hide behind the backward pass), and the prototype rule's verdict
counts. These float32 values (:data:`EXTRAS`, with the monitor's rate, min RTT and queueing delay)
ride on bucket 0's own collective
(appended to the allreduced buffer pre-divided by the world size, or packed into the
gathered bytes), so
every rank receives the same **mean over ranks** without an extra round trip. When that
collective completes, the policy (``netsenseml.policy`` or ``netsenseml.paper_rule``) turns
the mean into the decision (level, kept fraction) that the *next* step uses for all its
buckets: decisions are identical on all ranks and never change inside a step. (For
fp16/bf16 levels the piggy-backed values travel in that dtype, in ms and MB units; their
precision then is that of the dtype, still identical on all ranks.)

``netsenseml`` decides from the first step: :func:`register` runs a calibration once
(``netsenseml.calibration``), before
training (each level's codec time on a gradient-sized tensor, three one-element allreduces
for the latency, the fastest of three ``calibration_bytes`` allreduces for the bandwidth; one
more allreduce makes every rank use the mean), and the policy's first decision comes from
it. Registering ``netsenseml`` is therefore collective: every rank must call
:func:`register`, as every rank constructs DDP.

Methods come from the registry ``netsenseml.methods`` (one grammar for the hooks, the
compressors, the worker and the testbed). A ``compressor`` method runs steps 1-5 above
with the compressor's declared properties (``lossy`` -> error feedback, ``reduction``,
``dense``, ``max_nbytes``; ``netsenseml.compress.base``), whether built in or a user's class
named by import path.

A ``hook`` method is a function with DDP's comm-hook signature: ``powersgd:RANK`` (torch's
own ``powerSGD_hook`` on a ``PowerSGDState``) or any ``package.module:function``, e.g.
torch's ``fp16_compress_hook``. :func:`raw_hook` calls it with a
:class:`~netsenseml.counted_group.CountedGroup` (the state PowerSGD's state holds, or the
state itself for a plain hook): every collective the hook issues on it, from any thread,
is counted (bytes, busy time, monitor samples), not estimated from the hook's word. A
bucket starts only after the previous bucket finished (``serialize_buckets``, on by
default): hooks like PowerSGD launch collectives from completion callbacks, and with
several buckets in flight gloo could see them in a different order on different ranks.

World size 1 works (collectives of one rank): a single-process DDP job runs unchanged.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from netsenseml import accelerator, clock, convergence, job, methods
from netsenseml import payload as payload_mode
from netsenseml.bucket import reduce_bucket
from netsenseml.calibration import measure_calibration as measure_calibration  # re-exported
from netsenseml.comm import allreduce
from netsenseml.counted_group import counted_group
from netsenseml.job import report as report  # re-exported: hooks.report(samples=, loss=, ...)
from netsenseml.lifecycle import clean_exit as clean_exit  # re-exported: hooks.clean_exit()
from netsenseml.lifecycle import shutdown as shutdown  # re-exported: hooks.shutdown()
from netsenseml.loop import EXTRAS as EXTRAS  # re-exported: the piggy-backed values
from netsenseml.loop import N_EXTRAS as N_EXTRAS
from netsenseml.methods import METHOD_FORMS as METHOD_FORMS  # re-exported: the accepted forms
from netsenseml.methods import MethodSpec
from netsenseml.payload import PayloadError, check_compressor
from netsenseml.state import OPTION_NAMES, HookOptions
from netsenseml.state import NetSenseState as NetSenseState  # re-exported

_CALIBRATION_OPTIONS = ("calibration_bytes", "calibration_ratio")
#: The calibration's options under their names before issue 51 (then "the probe"), still taken.
_OLD_CALIBRATION_OPTIONS = {"probe_bytes": "calibration_bytes", "probe_ratio": "calibration_ratio"}
probe_network = measure_calibration  # the old name (issue 51), kept for callers of hooks
Hook = Callable[[NetSenseState, dist.GradBucket], torch.futures.Future[torch.Tensor]]


# --------------------------------------------------------------------- the hooks
def compression_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Fixed ``compressor`` methods (built-in or plug-in): ``state.compressor`` every step."""
    state.begin_bucket(bucket)
    assert state.compressor is not None
    # Equal on all ranks for a step and bucket: random-k's shared positions come from it.
    seed = (state.options.seed * 1_000_003 + state.step) * 1_009 + bucket.index()
    return reduce_bucket(state, bucket, state.compressor, None, seed)


def netsenseml_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The adaptive methods: the level and kept fraction the policy decided for this step."""
    first = state.begin_bucket(bucket)
    assert state.loop is not None
    probe = None
    if first and state.loop.rtt_probe_due():
        # A tiny collective for the monitor's min RTT and queueing delay, on every rank at
        # the same steps (decisions are identical). It runs beside the payload (gloo's
        # second thread), so it neither delays the payload nor times its start.
        probe = allreduce(torch.zeros(1, device=bucket.buffer().device), state.process_group,
                          state.recorder)
    # one decision per step; a per-bucket policy (Accordion) may give each bucket its own
    compressor = state.codecs.for_decision(state.decision.for_bucket(bucket.index()))
    fut = reduce_bucket(state, bucket, compressor, state.extras_for(first))
    if probe is None:
        return fut

    def joined(f: torch.futures.Future) -> torch.Tensor:
        # The step ends with the probe: a probe still in flight would count in no step's
        # statistics, and one pending when the process group is destroyed aborts the rank.
        probe.wait()
        return f.value()

    return fut.then(joined)


def raw_hook(state: NetSenseState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A ``hook`` method: ``state.hook(state.hook_state, bucket)``, counted by its group."""
    state.begin_bucket(bucket)
    # Hooks such as PowerSGD launch collectives from completion callbacks. Two buckets in
    # flight at once could then issue collectives in a different order on different ranks,
    # which gloo cannot match; so a bucket starts after the previous one finished.
    waited = None
    if state.options.serialize_buckets and state.previous_future is not None and bucket.index() != 0:
        state.previous_future.wait()
        waited = clock.now()  # until here the network held it, not the host
    n = bucket.buffer().numel()
    if state.pacer is not None:  # released at its profiled time
        state.pacer.bucket(n, not_before=waited)
        if state.options.payload and state.hook_state.compressing:  # the device's products
            state.pacer.codec(state.decision.level, 4 * n, clock.now())  # (profile), then sends
        # otherwise the hook computes on the host, inside its call: not paced
    state.count(0, n, n * 4, 0.0)
    assert state.hook is not None
    if state.method.plugin:
        with state.user_code(f"the comm hook plug-in {state.method.text!r}"):
            fut = state.hook(state.hook_state, bucket)
    else:
        fut = state.hook(state.hook_state, bucket)
    state.previous_future = fut
    return fut


def powersgd_state(group: Any, spec: MethodSpec, error_feedback: bool, options: dict[str, Any]) -> Any:
    """torch's ``PowerSGDState`` on the counting ``group`` (``start_powerSGD_iter`` 2, not 1000).

    2 is the earliest torch allows with error feedback; torch's default of 1000 vanilla
    iterations would hide PowerSGD from the short runs of the testbed.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

    return torch_powersgd.PowerSGDState(
        process_group=group,
        matrix_approximation_rank=spec.rank,
        use_error_feedback=error_feedback,
        **{"start_powerSGD_iter": spec.dense_steps, **options},
    )


# --------------------------------------------------------------------- registering
def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    method: str | MethodSpec | None = None,
    *,
    process_group: Any = None,
    error_feedback: bool = True,
    **options: Any,
) -> NetSenseState:
    """Registers the hook for ``method`` on ``ddp_model`` and returns its state.

    ``method``: None takes the run's method when the testbed started the job
    (``NETSENSE_METHOD``, ``netsenseml.job``), else ``allreduce`` (DDP's own fp32 allreduce,
    every byte counted); or any form of :data:`METHOD_FORMS`, including a plug-in
    ``package.module:Name[:ARG]`` (``netsenseml/PLUGINS.md``); a failed import or a class
    that is no compressor is a one-line ValueError before the model is touched. Options:
    every field of :class:`~netsenseml.state.HookOptions` (each documented there)
    and ``pacer`` (None; an emulated accelerator's ``netsenseml.accelerator.Pacer``); for
    ``netsenseml`` every :class:`~netsenseml.policy.NetSensePolicy` parameter and the
    calibration's ``calibration_bytes`` / ``calibration_ratio`` (:func:`measure_calibration`;
    ``probe_bytes`` / ``probe_ratio``, their old names, are taken too); for
    ``netsenseml-paper`` every :class:`~netsenseml.paper_rule.PaperRule` parameter (the
    prototype's constants by default); for ``powersgd`` the ``PowerSGDState`` parameters
    (``start_powerSGD_iter`` defaults to 2, the earliest torch allows with error feedback,
    instead of torch's 1000). A hook method (powersgd, a plug-in hook) creates a registered
    counting process group (``netsenseml.counted_group``), and ``netsenseml`` calibrates
    once (measures the network and its codecs): both are collective, so call ``register`` on every rank, in the same
    order, as DDP's constructor is.
    """
    # where a method enters the library: parsed once (a bad one named first, whatever the model)
    spec = methods.as_spec(job.default_method() if method is None else method)
    if not callable(getattr(ddp_model, "register_comm_hook", None)):
        raise TypeError(
            f"hooks.register: expects a DistributedDataParallel model, got "
            f"{type(ddp_model).__name__}; wrap it first: "
            "model = torch.nn.parallel.DistributedDataParallel(net)")
    if options.get("pacer") is None:
        options["pacer"] = _own_job_pacer(ddp_model)
    params = [p for p in ddp_model.parameters() if p.requires_grad]
    state, hook = build(spec, sum(p.numel() for p in params),
                        params[0].device if params else torch.device("cpu"),
                        process_group=process_group, error_feedback=error_feedback, **options)
    ddp_model.register_comm_hook(state, hook)
    state.job = job.attach(state, ddp_model, state.method.text)
    return state


def build(
    method: str | MethodSpec,
    elements: int,
    device: torch.device,
    *,
    process_group: Any = None,
    error_feedback: bool = True,
    payload: bool = False,
    **options: Any,
) -> tuple[NetSenseState, Hook]:
    """The state and hook function of ``method`` for a gradient of ``elements`` on
    ``device``, not attached to any model (:func:`register` attaches them to DDP; payload
    mode, ``workloads.payload``, calls the hook with its own buckets). ``payload``: the
    codecs send zeros of their real sizes and decode nothing (``netsenseml.payload``); a
    method that cannot is refused with a one-line ValueError. Collective where
    :func:`register` says so."""
    spec = methods.as_spec(method)
    target = methods.resolve(spec)
    common = {k: options.pop(k) for k in OPTION_NAMES if k in options}
    pacer = options.pop("pacer", None)
    for old_name, name in _OLD_CALIBRATION_OPTIONS.items():
        if old_name in options and spec.takes_calibration:
            options.setdefault(name, options.pop(old_name))
    calibration = ({k: options.pop(k) for k in _CALIBRATION_OPTIONS if k in options}
                   if spec.takes_calibration else {})
    policy, compressor = _build(spec, target, options)
    if payload:
        _payload_check(spec, target, policy, compressor)
    state = NetSenseState(
        spec, process_group,
        HookOptions(error_feedback=error_feedback and not payload,
                    memory_kind=target.info.memory or "residual", payload=payload, **common),
        policy=policy, compressor=compressor, pacer=pacer,
        level=compressor.name if spec.plugin and compressor is not None else target.info.label)
    hook: Hook = compression_hook
    if target.kind == "hook":
        _attach_raw_hook(state, target, error_feedback, options)
        hook = raw_hook
    elif target.kind == "adaptive":
        assert state.loop is not None and policy is not None
        if policy.needs_calibration:
            state.calibration = measure_calibration(state, elements, device, **calibration)
            state.loop.calibrate(state.calibration)
        hook = netsenseml_hook
    return state, hook


def _payload_check(spec: MethodSpec, target: Any, policy: Any, compressor: Any) -> None:
    """What payload mode cannot run (``netsenseml.payload``), refused in one line."""
    method = spec.text
    if target.kind == "hook" and not spec.payload_hook:
        raise PayloadError(f"method {method!r}: a comm-hook plug-in computes its own payload, "
                           "so payload mode cannot stand in for it; use grads: recorded")
    if compressor is not None:
        check_compressor(compressor, method)
    if policy is not None and getattr(policy, "needs_values", False):
        raise PayloadError(f"method {method!r}: its policy reads the gradient's values, which "
                           "payload mode does not have; use grads: recorded or real")


def _own_job_pacer(ddp_model: torch.nn.Module) -> accelerator.Pacer | None:
    """An own job under the testbed's emulated accelerator (``netsenseml.job``): its pacer."""
    timing = job.env_timing()
    if timing is None:
        return None
    return accelerator.Pacer(timing, sum(p.numel() for p in ddp_model.parameters() if p.requires_grad),
                             own_job=True)


def _build(spec: MethodSpec, target: Any, options: dict[str, Any]) -> tuple[Any, Any]:
    """The method's policy (adaptive) or compressor; ``options`` left: a hook state's."""
    method = spec.text
    if spec.reads_prior:
        try:  # a path, a parsed table or {level: steps}; None: the stated default
            options["prior"] = convergence.load(options.pop("convergence", options.pop("prior", None)))
        except convergence.ConvergenceError as exc:
            raise ValueError(f"invalid option convergence for method {method!r}: {exc}") from None
    if target.kind == "adaptive":
        return target.build(**options), None  # an unknown keyword: a one-line ValueError
    if options and not (target.kind == "hook" and target.info.state):
        raise ValueError(f"unknown options for method {method!r}: {sorted(options)}")
    return None, (target.build() if target.kind == "compressor" else None)


def _attach_raw_hook(state: NetSenseState, target: Any, error_feedback: bool,
                     options: dict[str, Any]) -> None:
    """A ``hook`` method's function and its state, on a counting process group."""
    method = state.method.text
    group = counted_group(state.process_group, state.recorder)
    state.hook = target.obj
    state.hook_state = group
    if state.options.payload:  # powersgd (the only hook _payload_check lets through)
        state.hook = payload_mode.powersgd_hook
        try:
            state.hook_state = payload_mode.powersgd_state(group, state.method, error_feedback, options)
        except TypeError as exc:
            raise ValueError(f"invalid options for method {method!r}: {exc}") from None
    elif target.info.state:
        factory = methods.import_target(target.info.state, state.method.text)
        try:
            state.hook_state = factory(group, state.method, error_feedback, options)
        except TypeError as exc:  # an unknown keyword of the hook's state
            raise ValueError(f"invalid options for method {method!r}: {exc}") from None
