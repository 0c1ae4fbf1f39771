"""`ridgeline-worker serving-bench`: run a load-testing tool (aiperf or GuideLLM) against an OpenAI-compatible
endpoint and upload its result file, with the deployment it measured, to `POST /v1/serving-benchmarks`. Spooled
first like kernel results (worker.upload): a service that is away gets it from `ridgeline-worker flush`.

The tools run as subprocesses from their own virtualenv (`scripts/setup.sh loadtools` makes `.venv-loadtools`;
`--tools-dir` or `PATH` finds them elsewhere): their dependencies pin versions Ridgeline's own do not take.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from schemas.serving_benchmarks import ServingBenchmarkCreate

TOOLS = ("aiperf", "guidellm")
DEFAULT_TOOLS_DIR = Path(__file__).resolve().parents[1] / ".venv-loadtools" / "bin"


class ToolError(RuntimeError):
    pass


@dataclass(frozen=True)
class Load:
    """A closed loop of fixed lengths, as both tools run it."""

    concurrency: int
    requests: int
    prompt_tokens: int
    output_tokens: int


def executable(tool: str, tools_dir: Path | None = None) -> str:
    for directory in (tools_dir, DEFAULT_TOOLS_DIR):
        if directory is not None and (directory / tool).exists():
            return str(directory / tool)
    found = shutil.which(tool)
    if found is None:
        raise ToolError(f"{tool} is not installed: scripts/setup.sh loadtools, or --tools-dir")
    return found


def aiperf_command(exe: str, url: str, model: str, tokenizer: str, out: Path, load: Load) -> tuple[list[str], Path]:
    """`aiperf profile` (aiperf 0.13.0's flags): streamed completions, a closed loop at `load.concurrency` after
    as many warm-up requests, fixed lengths (`ignore_eos`); its profile export."""
    args = [exe, "profile", "--model", model, "--url", url, "--endpoint-type", "completions", "--streaming",
            "--tokenizer", tokenizer, "--concurrency", str(load.concurrency), "--request-count", str(load.requests),
            "--warmup-request-count", str(load.concurrency),
            "--synthetic-input-tokens-mean", str(load.prompt_tokens), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(load.output_tokens), "--output-tokens-stddev", "0",
            "--extra-inputs", "ignore_eos:true", "--artifact-dir", str(out), "--ui-type", "none"]  # fmt: skip
    return args, out / "profile_export_aiperf.json"


def guidellm_command(exe: str, url: str, model: str, tokenizer: str, out: Path, load: Load) -> tuple[list[str], Path]:
    """`guidellm run` (GuideLLM 0.8.1's options): the concurrent profile, synthetic text of fixed lengths; its JSON
    report."""
    result = out / "benchmarks.json"
    args = [exe, "run", "--backend", f"kind=openai_http,target={url},model={model}",
            "--profile", f"kind=concurrent,streams={load.concurrency}",
            "--constraint", f"kind=max_requests,count={load.requests}",
            "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
            "--data", f"kind=synthetic_text,prompt_tokens={load.prompt_tokens},output_tokens={load.output_tokens}",
            "--output", f"kind=json,path={result}", "--disable-console-interactive"]  # fmt: skip
    return args, result


def run_tool(tool: str, url: str, model: str, tokenizer: str, out: Path, load: Load, *,
             tools_dir: Path | None = None, timeout_s: float = 3600) -> Path:  # fmt: skip
    """Run `tool` and return the result file it wrote. `ToolError` with the tail of its output when it fails."""
    make = {"aiperf": aiperf_command, "guidellm": guidellm_command}[tool]
    out.mkdir(parents=True, exist_ok=True)
    args, result = make(executable(tool, tools_dir), url, model, tokenizer, out, load)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=out, env=env)
    except subprocess.TimeoutExpired:
        raise ToolError(f"{tool} ran past {timeout_s:.0f} s") from None
    if done.returncode != 0 or not result.exists():
        raise ToolError(f"{tool} failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
    return result


def payload(fmt: str, result: Path, deployment: dict[str, Any], host: str | None = None) -> dict[str, Any]:
    """The upload: the tool's file as it wrote it and the deployment beside it, checked against the contract
    (`ValueError` naming the field) before it is spooled."""
    text = result.read_text()
    doc: Any = text if fmt == "sglang" else json.loads(text)
    body: dict[str, Any] = {"format": fmt, "result": doc, "deployment": deployment}
    if host:
        body["host"] = host
    try:
        ServingBenchmarkCreate.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        raise ValueError(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    return body


def cmd_serving_bench(args: Any) -> int:
    """Run the tool (or take `--result`), spool the upload, send it; the exit status as `ridgeline-worker run`'s."""
    import sys
    import tempfile

    from worker.client import RetryPolicy, RidgelineClient
    from worker.spool import SERVING_BENCHMARKS, Spool
    from worker.upload import DeliveryReport, deliver

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        deployment = json.loads(Path(args.deployment).read_text())
    except (OSError, json.JSONDecodeError) as err:
        say(f"--deployment: {err}")
        return 2
    if not isinstance(deployment, dict):
        say("--deployment: a JSON object (model, hardware, release, layout: docs/serving-benchmarks.md)")
        return 2
    fmt = args.tool
    if args.result is not None:
        result = Path(args.result)
    else:
        if not args.endpoint:
            say("serving-bench needs --endpoint (or --result: a file the tool wrote)")
            return 2
        load = Load(args.concurrency, args.requests, args.prompt_tokens, args.output_tokens)
        model = args.model or str(deployment.get("model", ""))
        out = Path(args.out_dir) if args.out_dir else Path(tempfile.mkdtemp(prefix=f"ridgeline-{fmt}-"))
        say(f"{fmt}: {load.requests} requests at concurrency {load.concurrency} against {args.endpoint}")
        try:
            result = run_tool(fmt, args.endpoint, model, args.tokenizer or model, out, load, tools_dir=args.tools_dir)
        except ToolError as err:
            say(str(err))
            return 1
        say(f"{fmt} wrote {result}")
    try:
        body = payload(fmt, result, deployment, args.host)
    except (OSError, ValueError) as err:
        say(f"not uploaded: {err}")
        return 2
    spool = Spool(args.spool_dir)
    entry = spool.put(body, SERVING_BENCHMARKS)
    if not args.server:
        say(f"spooled in {spool.root} (no --server): send it with `ridgeline-worker flush`")
        return 75
    retry = RetryPolicy(attempts=args.retries, base_s=args.backoff_s, max_s=args.backoff_max_s)
    report = DeliveryReport()
    with RidgelineClient(args.server, args.token, timeout_s=args.timeout_s, retry=retry) as client:
        deliver(client, spool, entry, report)
    if report.sent_batches:
        say("uploaded" + (" (already stored)" if report.replayed_batches else ""))
        return 0
    for error in report.errors[-3:]:
        say(error)
    if report.spooled_batches:
        say(f"spooled in {spool.root}: send it with `ridgeline-worker flush`")
        return 75
    return 1


def add_parser(sub: Any, connection: Any, spool: Any) -> None:
    p = sub.add_parser(
        "serving-bench", help="run aiperf or GuideLLM against an endpoint and upload the result with its deployment"
    )
    connection(p)
    spool(p)
    p.add_argument("--tool", choices=TOOLS, required=True)
    p.add_argument("--endpoint", help="the OpenAI-compatible server's base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--deployment", required=True, help="JSON file: the deployment measured (model, hardware, "
                   "release, parallelism, engine; POST /v1/serving-benchmarks' `deployment`)")  # fmt: skip
    p.add_argument("--model", help="the model name the endpoint serves (default: the deployment's model)")
    p.add_argument("--tokenizer", help="the tokenizer the tool loads (default: the model name)")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--output-tokens", type=int, default=256)
    p.add_argument("--result", type=Path, help="upload this file the tool wrote instead of running it")
    p.add_argument("--out-dir", type=Path, help="where the tool writes (default: a new temporary directory)")
    p.add_argument("--tools-dir", type=Path, help="directory of the tools' executables (default .venv-loadtools/bin)")
    p.add_argument("--host", help="the host the load test ran from")
    p.set_defaults(func=cmd_serving_bench)
