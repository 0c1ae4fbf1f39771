"""`ridgeline-worker`: detect the device, run kernel suites, time them, upload the results to Ridgeline.

    ridgeline-worker detect [--server URL]
    ridgeline-worker suites
    ridgeline-worker run --server URL --token KEY [--suite ceilings,matmul] [--quick]
    ridgeline-worker flush --server URL --token KEY
    ridgeline-worker serving-bench --tool aiperf --endpoint URL --deployment FILE --server URL --token KEY

Settings come from flags or the environment: RIDGELINE_URL, RIDGELINE_TOKEN, RIDGELINE_SPOOL_DIR.
Exit status: 0 all done; 1 a case failed or a batch was refused; 2 bad usage or an unknown device;
75 (EX_TEMPFAIL) results wait in the spool for `ridgeline-worker flush`; 130 or 143 the run was stopped by SIGINT
or SIGTERM (what it measured is in the spool).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from schemas.benchmarks import MAX_RESULTS
from worker.client import Rejected, Resolution, RetryPolicy, RidgelineClient, ServiceUnavailable, UploadError

if TYPE_CHECKING:
    from worker.device import Device
    from worker.hostprofile import HostFacts
    from worker.results import Measurement
    from worker.spool import Spool

EX_TEMPFAIL = 75
DEFAULT_CPU_DEVICES = 8


def default_spool_dir(env: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    if env.get("RIDGELINE_SPOOL_DIR"):
        return Path(env["RIDGELINE_SPOOL_DIR"]).expanduser()
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "ridgeline-worker" / "spool"


def prepare_jax_environment(cpu_devices: int, env: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Ask XLA for `cpu_devices` host devices (collectives need several) before JAX starts; a flag already set by
    the user wins. Harmless on accelerator hosts, where JAX's default devices stay the GPUs or TPUs."""
    flags = env.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={cpu_devices}".strip()


def _client(args: argparse.Namespace) -> RidgelineClient | None:
    if not args.server:
        return None
    retry = RetryPolicy(attempts=args.retries, base_s=args.backoff_s, max_s=args.backoff_max_s)
    return RidgelineClient(args.server, getattr(args, "token", None), timeout_s=args.timeout_s, retry=retry)


def _print(stream: TextIO, message: str) -> None:
    stream.write(message + "\n")
    stream.flush()


def _resolve(client: RidgelineClient, description: str, platform: str) -> Resolution | None:
    """The service's profile for the device. A host CPU: this host's measured profile if the ceilings suite made one
    (worker.hostprofile), else the profile its description maps to, else the generic CPU profile."""
    if platform == "cpu":
        from worker.device import host_name
        from worker.hostprofile import host_slug

        slug = host_slug(host_name())
        measured = client.hardware(slug)
        if measured is not None:
            return Resolution(device=description, slug=slug, name=str(measured.get("name", slug)), rule="measured host")
    found = client.resolve(description)
    if found is None and platform == "cpu":
        found = client.resolve("cpu")
    return found


class Terminated(BaseException):
    """SIGTERM (a scheduler's preemption, `timeout`): ends a run as Ctrl-C does, between two statements of the
    case in progress, so that the run can spool what it measured and say so."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


# The SIGTERM a run received, kept apart from the exception: raised inside C code (numpy's dtype lookup, a JAX
# dispatch), `Terminated` can come back out as a SystemError ("returned a result with an exception set"), which the
# run loop would count as a failed case and carry on; the loop checks this after every case instead.
_received: list[int] = []


def _terminate(signum: int, _frame: object) -> None:
    _received.append(signum)
    raise Terminated(signum)


def _stop_if_signalled() -> None:
    if _received:
        raise Terminated(_received[0])


def _recover(spool: Spool, stream: TextIO) -> None:
    """Spool the measurements of runs that were killed before their batch was full (`Spool.recover`)."""
    batches, recovered = spool.recover()
    if batches:
        _print(stream, f"{recovered} measurements of an interrupted run recovered into the spool ({batches} batches)")


def cmd_detect(args: argparse.Namespace) -> int:
    from worker.device import detect, software_versions

    device = detect()
    doc: dict[str, Any] = {"device": device.to_json(), "software": software_versions(device)}
    client = _client(args)
    status = 0
    if client is not None:
        with client:
            try:
                found = _resolve(client, device.description, device.platform)
            except UploadError as err:
                doc["hardware"] = None
                doc["error"] = str(err)
                status = EX_TEMPFAIL if isinstance(err, ServiceUnavailable) else 1
            else:
                doc["hardware"] = found.slug if found else None
                doc["rule"] = found.rule if found else None
                status = 0 if found else 2
    if args.json:
        print(json.dumps(doc, indent=2))
        return status
    where = f"{device.platform}, {device.vendor}, {device.count} local, via {device.source}"
    print(f"device:   {device.description} ({where})")
    if "hardware" in doc:
        if doc["hardware"]:
            print(f"hardware: {doc['hardware']} ({doc['rule']})")
        elif "error" in doc:
            print(f"hardware: not resolved: {doc['error']}")
        else:
            print(f"hardware: unknown: no profile matches {device.description!r}; add one (POST /v1/hardware) or pass")
            print("          --hardware SLUG to `run`")
    else:
        print("hardware: not resolved (no --server / RIDGELINE_URL)")
    print("software: " + ", ".join(f"{k} {v}" for k, v in doc["software"].items()))
    return status


def cmd_suites(args: argparse.Namespace) -> int:
    from worker.suites import SUITES

    for suite in SUITES.values():
        print(f"{suite.name:<12} {suite.summary}")
    return 0


def _profile_dtypes(client: RidgelineClient, slug: str) -> frozenset[str] | None:
    try:
        profile = client.get_json(f"/v1/hardware/{slug}")
        compute = profile.get("compute", {})
        return frozenset(compute.get("matrix_flops_per_s", {})) | frozenset(compute.get("vector_flops_per_s", {}))
    except (UploadError, AttributeError, TypeError):
        return None


def _describe(stats: Any) -> str:
    ms = (stats.median_s * 1e3, stats.p10_s * 1e3, stats.p90_s * 1e3)
    return f"median {ms[0]:.4g} ms (p10 {ms[1]:.4g}, p90 {ms[2]:.4g}, n={stats.repeats})"


def _host_facts(device: Device, software: dict[str, str]) -> HostFacts:
    import datetime

    from worker.device import cpu_l1d_bytes, cpu_vector_bytes, host_name
    from worker.hostprofile import HostFacts

    if device.memory_bytes is None:
        raise ValueError("the host's memory size is unknown (sysconf _SC_PHYS_PAGES)")
    return HostFacts(
        hostname=host_name(),
        description=device.description,
        vendor=device.vendor,
        cores=device.compute_units or 1,
        memory_bytes=device.memory_bytes,
        llc_bytes=device.cache_bytes,
        l1d_bytes=cpu_l1d_bytes(),
        vector_bytes=cpu_vector_bytes(),
        date=datetime.datetime.now(datetime.UTC).date().isoformat(),
        software=", ".join(f"{k} {software[k]}" for k in ("jax", "jaxlib") if k in software),
    )


def _publish_host_profile(client: RidgelineClient | None, device: Device, software: dict[str, str],
                          measured: list[Measurement], say: Callable[[str], None]) -> bool:  # fmt: skip
    """Build this host's profile from the ceilings and put it on the service; False when that failed for good
    (the service refused it, or the measurements cannot be explained), True otherwise."""
    from worker.hostprofile import Ceilings, build_profile, publish

    ceilings = Ceilings.of(measured)
    if ceilings is None:
        say("host profile: the ceilings are incomplete (a case failed or was skipped); not built")
        return False
    try:
        doc = build_profile(ceilings, _host_facts(device, software))
    except ValueError as error:
        say(f"host profile: not built: {error}")
        return False
    # A quiet host times a ceiling within a few % from call to call; a spread of 2× means other work took the cores.
    busy = [m.name for m in measured if m.stats.p90_s > 2 * m.stats.p10_s]
    if busy:
        say(f"host profile: warning: {', '.join(busy)} varied more than 2× between calls (p10 to p90): the host was "
            "busy, and predictions from this profile will carry that; measure again when it is quiet")  # fmt: skip
    compute = doc["compute"]
    peaks = ", ".join(f"{d} {v / 1e9:.4g} GFLOP/s" for d, v in compute["matrix_flops_per_s"].items())
    summary = (f"{compute['units']} cores, {peaks}, {doc['memory']['device']['bandwidth_bytes_per_s'] / 1e9:.4g} GB/s, "
               f"{doc['overheads']['kernel_launch_s'] * 1e6:.4g} µs per call")  # fmt: skip
    if client is None:
        say(f"host profile {doc['slug']} ({summary}): not published (no service); run the ceilings suite again")
        return True
    try:
        what = publish(client, doc)
    except ServiceUnavailable as error:
        say(f"host profile {doc['slug']}: not published, the service is unreachable ({error}); run the "
               "ceilings suite again later")  # fmt: skip
        return True
    except Rejected as error:
        say(f"host profile {doc['slug']}: refused: {error}")
        return False
    say(f"host profile {doc['slug']} {what} ({summary}); later runs on this host are predicted from it")
    return True


def cmd_run(args: argparse.Namespace) -> int:
    err = sys.stderr
    from worker.device import detect, host_name, software_versions
    from worker.progress import Progress
    from worker.results import Measurement, RunInfo, host_overhead_s
    from worker.spool import Spool
    from worker.suites import SUITES, Context, SkipCase, Target, plan, triton_available
    from worker.timing import TimingPolicy
    from worker.upload import Uploader, flush

    if not 1 <= args.batch_size <= MAX_RESULTS:
        _print(err, f"--batch-size must be between 1 and {MAX_RESULTS} (results per upload)")
        return 2
    device = detect()
    client = _client(args)
    hardware = args.hardware
    if hardware is None and client is not None:
        try:
            found = _resolve(client, device.description, device.platform)
        except ServiceUnavailable as error:
            _print(err, f"service unreachable ({error}); results name the device for the service to map")
            hardware = device.description
        except UploadError as error:
            _print(err, f"cannot resolve the device: {error}")
            return 1
        else:
            if found is None:
                _print(err, f"no hardware profile matches {device.description!r}: add one or pass --hardware SLUG")
                return 2
            hardware = found.slug
    if hardware is None:
        hardware = device.description
    profile_dtypes = (
        _profile_dtypes(client, hardware) if client is not None and hardware != device.description else None
    )

    import jax

    has_triton = triton_available()
    names = [n.strip() for n in args.suite.split(",") if n.strip()] if args.suite else list(SUITES)
    if not args.suite and not has_triton:
        names.remove("triton")
    if "triton" in names and not has_triton:
        _print(err, "triton: needs Triton, PyTorch and an NVIDIA GPU here; no Triton cases")
    size = args.size or ("quick" if device.platform == "cpu" else "full")
    target = Target(device, size, len(jax.devices()), profile_dtypes, has_triton)
    try:
        cases = plan(names, target)
    except ValueError as error:
        _print(err, str(error))
        return 2
    if args.dry_run:
        for case in cases:
            print(json.dumps({"suite": case.suite, "name": case.name, "op": case.op}))
        return 0

    default_cache = (32 << 20) if device.platform == "cpu" else (64 << 20)
    rotate = args.rotate_mb << 20 if args.rotate_mb else 2 * (device.cache_bytes or default_cache)
    policy = TimingPolicy.quick(rotate) if size == "quick" else TimingPolicy(rotate_bytes=rotate)
    ctx = Context(target, policy, seed=args.seed, ceiling_policy=policy.for_ceilings())
    spool = Spool(args.spool_dir)
    _recover(spool, err)
    software = software_versions(device)
    info = RunInfo(hardware=hardware, host=host_name(), software=software)
    uploader = Uploader(spool, info, client, batch_size=args.batch_size)
    results_file = open(args.results_out, "a", encoding="utf-8") if args.results_out else None  # noqa: SIM115

    _print(err, f"device {device.description} ({device.platform}, {target.local_devices} local) → hardware {hardware}")
    _print(err, f"suites {', '.join(names)}: {len(cases)} cases, size {size}; spool {spool.root}")
    progress = Progress(len(cases), err)
    measured = skipped = failed = 0
    suite_s: dict[str, float] = {}
    ceiling_cases = [case for case in cases if case.notes.get("ceiling")] if device.platform == "cpu" else []
    ceilings: list[Measurement] = []
    stopped: BaseException | None = None
    _received.clear()
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        for case in cases:
            _stop_if_signalled()
            started = time.monotonic()
            try:
                stats = case.run(ctx)
                measurement = Measurement(case.suite, case.name, case.op, stats, case.timing_scope, case.notes)
            except SkipCase as why:
                skipped += 1
                progress.note(f"skipped {case.suite}: {case.name}: {why}")
                progress.step(f"{case.suite}: {case.name}", "skipped")
            except Exception as error:  # one broken case must not lose the others
                _stop_if_signalled()  # unless it was the SIGTERM, rewrapped on its way out of C code
                failed += 1
                progress.note(f"FAILED {case.suite}: {case.name}: {type(error).__name__}: {error}")
                progress.step(f"{case.suite}: {case.name}", "failed")
            else:
                measured += 1
                record = measurement.record()
                if device.platform != "cpu" and case.notes.get("ceiling") == "dispatch":
                    # Every wall-clock batch after it states the host's per-call cost (`host_overhead_s`).
                    overhead = host_overhead_s(stats)
                    uploader.info = replace(uploader.info, host_overhead_s=overhead)
                    record["uploaded"], record["host_overhead_s"] = False, overhead
                    progress.note(f"{case.suite}: {case.name}: the host's cost per call, {overhead * 1e6:.4g} µs, "
                                  "goes with the run; not sent itself")  # fmt: skip
                elif case.upload:
                    uploader.add(measurement)
                else:
                    record["uploaded"] = False
                    progress.note(f"{case.suite}: {case.name}: kept for the host profile, not sent ({hardware} "
                                  "has no peak to predict it with)")  # fmt: skip
                if results_file is not None:
                    results_file.write(json.dumps(record, sort_keys=True) + "\n")
                    results_file.flush()
                if case.notes.get("ceiling"):
                    ceilings.append(measurement)
                progress.step(f"{case.suite}: {case.name}", _describe(stats))
            suite_s[case.suite] = suite_s.get(case.suite, 0.0) + time.monotonic() - started
            # On a CPU the ceilings make this host's profile as soon as their last case has run (worker.hostprofile).
            if ceiling_cases and case is ceiling_cases[-1]:
                online = client if not (uploader.report.offline or uploader.report.auth_failed) else None
                if not _publish_host_profile(online, device, software, ceilings, progress.note):
                    failed += 1
        report = uploader.close()
    except (KeyboardInterrupt, Terminated) as stop:
        stopped = stop
        report = uploader.spool_rest()  # every measurement is already in a journal; now in pending/ too
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress.close()
        if results_file is not None:
            results_file.close()
    if stopped is not None:
        signum = stopped.signum if isinstance(stopped, Terminated) else signal.SIGINT
        _print(err, f"{signal.Signals(signum).name}: stopped after {measured + skipped + failed} of {len(cases)} "
                    f"cases; {report.summary()}")  # fmt: skip
        if report.spooled_batches:
            _print(err, f"results wait in {spool.root}; send them with `ridgeline-worker flush`")
        if client is not None:
            client.close()
        return 128 + int(signum)
    if client is not None:
        if not (report.offline or report.auth_failed) and spool.count()[0]:
            _print(err, "sending batches left in the spool by earlier runs")
            report.merge(flush(client, spool))
        client.close()
    _print(err, "time per suite: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in suite_s.items()))
    _print(err, f"measured {measured}, skipped {skipped}, failed {failed}; {report.summary()}")
    if report.spooled_batches:
        _print(err, f"results wait in {spool.root}; send them with `ridgeline-worker flush`")
    if failed or report.rejected_batches or report.conflict_batches or report.auth_failed:
        return 1
    return EX_TEMPFAIL if report.spooled_batches else 0


def cmd_flush(args: argparse.Namespace) -> int:
    from worker.spool import Spool
    from worker.upload import flush

    client = _client(args)
    if client is None:
        _print(sys.stderr, "flush needs --server or RIDGELINE_URL")
        return 2
    spool = Spool(args.spool_dir)
    _recover(spool, sys.stderr)
    if args.retry_rejected:
        _print(sys.stderr, f"{spool.requeue_rejected()} refused or conflicting batches queued again")
    batches, results = spool.count()
    _print(sys.stderr, f"{batches} batches ({results} results) pending in {spool.root}")
    with client:
        report = flush(client, spool, progress=lambda message: _print(sys.stderr, message))
    _print(sys.stderr, report.summary())
    for error in report.errors[-5:]:
        _print(sys.stderr, f"  {error}")
    if report.rejected_batches or report.conflict_batches or report.auth_failed:
        return 1
    return EX_TEMPFAIL if report.spooled_batches else 0


def cmd_check_triton(args: argparse.Namespace) -> int:
    try:
        from worker.triton_kernels import compile_all
    except ImportError as error:
        _print(sys.stderr, f"Triton is not installed: {error}")
        return 2
    for arch in args.arch:
        for name, size in compile_all(arch).items():
            print(f"sm_{arch} {name}: cubin {size} bytes")
    return 0


def build_parser(env: dict[str, str] | os._Environ[str] = os.environ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ridgeline-worker",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def connection(p: argparse.ArgumentParser, token: bool = True) -> None:
        p.add_argument("--server", default=env.get("RIDGELINE_URL"), help="service URL (RIDGELINE_URL)")
        if token:
            p.add_argument("--token", default=env.get("RIDGELINE_TOKEN"), help="upload key (RIDGELINE_TOKEN)")
        p.add_argument("--timeout-s", type=float, default=60.0, help="per-request timeout (default 60)")
        p.add_argument("--retries", type=int, default=5, help="tries per request (default 5)")
        p.add_argument("--backoff-s", type=float, default=0.5, help="first back-off, doubled per retry (default 0.5)")
        p.add_argument("--backoff-max-s", type=float, default=30.0, help="longest back-off (default 30)")

    def spool(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--spool-dir",
            type=Path,
            default=default_spool_dir(env),
            help="where unsent batches wait (RIDGELINE_SPOOL_DIR)",
        )

    detect = sub.add_parser("detect", help="print the device, its catalogue profile and software versions")
    connection(detect, token=False)
    detect.add_argument("--json", action="store_true", help="machine-readable output")
    detect.add_argument("--cpu-devices", type=int, default=DEFAULT_CPU_DEVICES, help=argparse.SUPPRESS)
    detect.set_defaults(func=cmd_detect)

    suites = sub.add_parser("suites", help="list the suites")
    suites.set_defaults(func=cmd_suites)

    run = sub.add_parser("run", help="run suites, time them, upload the results")
    connection(run)
    spool(run)
    run.add_argument("--suite", help="comma-separated suites (default: every suite this device can run)")
    sizes = run.add_mutually_exclusive_group()
    sizes.add_argument("--size", choices=["quick", "full"], help="quick: CI sizes; full: the real sweep "
                       "(default: full on accelerators, quick on CPUs)")  # fmt: skip
    sizes.add_argument("--quick", dest="size", action="store_const", const="quick", help="same as --size quick")
    run.add_argument("--hardware", help="catalogue slug to file results under (default: ask the service)")
    run.add_argument("--batch-size", type=int, default=200, help="results per upload (default 200)")
    run.add_argument("--results-out", type=Path, help="also append every result to this JSON-lines file")
    run.add_argument("--cpu-devices", type=int, default=DEFAULT_CPU_DEVICES,
                     help="virtual CPU devices for collectives on hosts without accelerators (default 8)")  # fmt: skip
    run.add_argument("--rotate-mb", type=int, help="input bytes cycled between timed calls (default 2 × LLC/L2)")
    run.add_argument("--seed", type=int, default=0, help="random inputs' seed")
    run.add_argument("--dry-run", action="store_true", help="print the planned cases and their op objects; run none")
    run.set_defaults(func=cmd_run)

    flush = sub.add_parser("flush", help="send the batches waiting in the spool")
    connection(flush)
    spool(flush)
    flush.add_argument("--retry-rejected", action="store_true",
                       help="send refused and conflicting batches again (after adding a profile, say)")  # fmt: skip
    flush.set_defaults(func=cmd_flush)

    from worker.servingbench import add_parser as serving_bench

    serving_bench(sub, connection, spool)

    check = sub.add_parser("check-triton", help="compile the Triton kernels for NVIDIA targets (no GPU needed)")
    check.add_argument("--arch", type=int, nargs="+", default=[80, 90], help="SM versions (default 80 90)")
    check.set_defaults(func=cmd_check_triton)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "cpu_devices"):
        prepare_jax_environment(args.cpu_devices)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
