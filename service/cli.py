"""`ridgeline`: serve the API, migrate the database, load the catalogue, emulate a deployment."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hardware_db import CatalogueError, load_hardware, load_models
from service.settings import Settings

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger("ridgeline")


def _settings(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if getattr(args, "database_url", None):
        settings = settings.model_copy(update={"database_url": args.database_url})
    return settings


def _prepare(settings: Settings, *, migrate: bool, load: bool) -> None:
    """The prestart step: bring the schema to head, then load the catalogue."""
    from service import migrate as migrations
    from service.catalogue.load import load_catalogue
    from service.db import make_engine, make_sessionmaker

    if migrate:
        migrations.upgrade(settings.database_url)
        print(f"database at revision {migrations.current_revision(settings.database_url)}", flush=True)
    if load:
        engine = make_engine(settings.database_url)
        try:
            for name, report in load_catalogue(make_sessionmaker(engine)).items():
                print(f"catalogue {name}: {report.summary()}", flush=True)
        finally:
            engine.dispose()


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = _settings(args)
    _prepare(settings, migrate=not args.no_migrate, load=settings.load_catalogue_on_start and not args.no_load)
    # Worker processes build their own Settings from the environment: hand them the same database.
    os.environ["RIDGELINE_DATABASE_URL"] = settings.database_url
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="ridgeline-metrics-")
    print(f"Ridgeline listening on http://{args.host}:{args.port} (docs at /docs)", flush=True)
    config = uvicorn.Config(
        "service.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=settings.log_level,
        timeout_graceful_shutdown=args.graceful_shutdown_s,
        proxy_headers=True,
    )
    _run_uvicorn(config)
    return 0


def _run_uvicorn(config: uvicorn.Config) -> None:
    """`uvicorn.run`, with TCP_NODELAY on the listening socket that several workers share.

    asyncio sets TCP_NODELAY only on sockets whose `proto` is IPPROTO_TCP; the socket uvicorn binds for its worker
    processes is made with proto 0, so with --workers > 1 every response (head and body are two writes) waited for the
    client's delayed ACK: ~40 ms per request, 160 requests/s for a constant (bench/throughput.py). Linux copies the
    option from the listening socket to every accepted one.
    """
    import socket

    from uvicorn import Server
    from uvicorn.supervisors import Multiprocess

    if config.workers <= 1:
        Server(config).run()
        return
    sock = config.bind_socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    Multiprocess(config, sockets=[sock]).run()


def cmd_db(args: argparse.Namespace) -> int:
    from service import migrate as migrations

    url = _settings(args).database_url
    if args.db_command == "upgrade":
        migrations.upgrade(url, args.revision)
    elif args.db_command == "downgrade":
        migrations.downgrade(url, args.revision)
    print(f"database at revision {migrations.current_revision(url)} (head {migrations.head_revision()})")
    return 0


def cmd_catalogue(args: argparse.Namespace) -> int:
    if args.catalogue_command == "check":
        try:
            hardware, models = load_hardware(), load_models()
        except CatalogueError as err:
            print(err, file=sys.stderr)
            return 1
        print(f"{len(hardware)} hardware profiles and {len(models)} model configs are valid")
        return 0
    try:
        _prepare(_settings(args), migrate=args.migrate, load=True)
    except CatalogueError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from service import auth
    from service.db import make_engine, make_sessionmaker, unit_of_work
    from service.errors import NotFound

    engine = make_engine(_settings(args).database_url)
    try:
        for session in unit_of_work(make_sessionmaker(engine)):
            if args.keys_command == "create":
                new = auth.create_key(session, args.name, auth.Scope(args.scope))
                print(f"created API key {new.id} ({new.name}, scope {new.scope}, prefix {new.prefix}).")
                print("It is shown only this once; store it now:", file=sys.stderr)
                print(new.key)
            elif args.keys_command == "revoke":
                try:
                    revoked = auth.revoke_key(session, args.key)
                except NotFound as err:
                    print(err.message, file=sys.stderr)
                    return 1
                for row in revoked:
                    print(f"revoked API key {row.id} ({row.name}, prefix {row.prefix})")
            else:
                print(f"{'id':>4}  {'prefix':<9} {'scope':<9} {'created':<20} {'revoked':<20} name")
                for row in auth.list_keys(session):
                    revoked_at = f"{row.revoked_at:%Y-%m-%d %H:%M:%S}" if row.revoked_at else "-"
                    print(
                        f"{row.id:>4}  {row.prefix:<9} {row.scope:<9} {row.created_at:%Y-%m-%d %H:%M:%S}  "
                        f"{revoked_at:<20} {row.name}"
                    )
    finally:
        engine.dispose()
    return 0


def cmd_benchmarks(args: argparse.Namespace) -> int:
    import socket
    from pathlib import Path

    import httpx

    from measured import importer
    from schemas.benchmarks import TimingScope

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per batch is ours to print
    path = Path(args.file)
    try:
        parsed = importer.parse(args.format, path, args.collective, args.kernel_source)
    except importer.FormatError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    hardware = args.hardware or parsed.device
    if not hardware:
        print("error: say which profile the results are for with --hardware SLUG", file=sys.stderr)
        return 2
    if not args.token:
        print(
            "error: an upload key is needed: --token KEY or $RIDGELINE_TOKEN (ridgeline keys create)", file=sys.stderr
        )
        return 2
    scope = parsed.timing_scope if args.timing_scope is None else args.timing_scope
    parsed.timing_scope = TimingScope(scope)
    software = dict(item.split("=", 1) for item in args.software)
    print(f"{path.name}: {len(parsed.results)} results ({args.format}, timing scope {parsed.timing_scope})")
    if parsed.skipped:
        print(f"  not imported: {', '.join(f'{why} ({n} rows)' for why, n in parsed.skipped.items())}")
    stored = 0
    try:
        for index, body, replayed in importer.post(
            parsed,
            server=args.server,
            token=args.token,
            hardware=hardware,
            host=args.host or socket.gethostname(),
            file_digest=importer.digest(path, args.format),
            software=software,
            batch_size=args.batch_size,
        ):
            stored += 0 if replayed else body["results"]
            note = " (already imported: nothing stored)" if replayed else ""
            print(f"  batch {index}: run {body['id']} on {body['hardware']}, {body['results']} results{note}")
    except httpx.HTTPStatusError as err:
        print(f"error: the server refused a batch ({err.response.status_code}): {err.response.text}", file=sys.stderr)
        return 1
    except httpx.HTTPError as err:
        print(f"error: cannot reach {args.server}: {err}", file=sys.stderr)
        return 1
    print(f"{stored} results stored")
    return 0


def cmd_emulate(args: argparse.Namespace) -> int:
    import uvicorn

    from service.emulate.app import create_emulator
    from service.emulate.build import DeploymentError, deployment_doc, emulated

    try:
        doc = deployment_doc(args.deployment, args.model, args.hardware)
        served = emulated(doc, args.max_tokens, args.default_output_tokens, args.served_model_name)
    except DeploymentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"Emulated {served.model} listening on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(create_emulator(served), host=args.host, port=args.port, log_level="warning")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ridgeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    db_url_help = "database URL (default: $RIDGELINE_DATABASE_URL, $DATABASE_URL, or sqlite:///ridgeline.db)"

    serve = sub.add_parser("serve", help="migrate, load the catalogue and serve the API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--database-url", help=db_url_help)
    serve.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    serve.add_argument("--no-migrate", action="store_true", help="do not upgrade the schema first")
    serve.add_argument("--no-load", action="store_true", help="do not load the built-in catalogue first")
    serve.add_argument("--graceful-shutdown-s", type=int, default=30, help="time in-flight requests get on SIGTERM")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", help="database schema migrations")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser("upgrade", help="upgrade to a revision (default head)")
    up.add_argument("revision", nargs="?", default="head")
    down = db_sub.add_parser("downgrade", help="downgrade to a revision (e.g. base)")
    down.add_argument("revision")
    db_sub.add_parser("current", help="print the current revision")
    for p in (up, down, db_sub.choices["current"]):
        p.add_argument("--database-url", help=db_url_help)
    db.set_defaults(func=cmd_db)

    cat = sub.add_parser("catalogue", help="the built-in hardware and model catalogue")
    cat_sub = cat.add_subparsers(dest="catalogue_command", required=True)
    load = cat_sub.add_parser("load", help="insert or update the built-in entries (idempotent)")
    load.add_argument("--database-url", help=db_url_help)
    load.add_argument("--migrate", action="store_true", help="upgrade the schema first")
    cat_sub.add_parser("check", help="validate the catalogue files without a database")
    cat.set_defaults(func=cmd_catalogue)

    keys = sub.add_parser("keys", help="API keys for uploads (stored hashed)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="make a key and print it once")
    create.add_argument("--name", required=True, help="who or what uses it, e.g. worker-gpu-node-17")
    create.add_argument(
        "--scope",
        choices=["upload", "catalogue", "admin"],
        default="upload",
        help="upload (default): benchmark runs and traces; catalogue: also hardware profiles and model configs; "
        "admin: everything, calibrations too",
    )
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id or prefix, or every live key with a name")
    revoke.add_argument("key", help="key id, prefix or name")
    keys_sub.add_parser("list", help="list keys (never the keys themselves)")
    for p in keys_sub.choices.values():
        p.add_argument("--database-url", help=db_url_help)
    keys.set_defaults(func=cmd_keys)

    bench = sub.add_parser("benchmarks", help="measured timings")
    bench_sub = bench.add_subparsers(dest="benchmarks_command", required=True)
    imp = bench_sub.add_parser(
        "import",
        help="post a file of measured timings to a server (nccl-tests output, the tables of ../shared/validation)",
    )
    imp.add_argument("--format", required=True, choices=importer_formats())
    imp.add_argument("file")
    imp.add_argument("--hardware", help="profile slug or device description (nccl-tests output names its device)")
    imp.add_argument("--server", default=os.environ.get("RIDGELINE_URL", "http://127.0.0.1:8000"))
    imp.add_argument("--token", default=os.environ.get("RIDGELINE_TOKEN"), help="an upload key ($RIDGELINE_TOKEN)")
    imp.add_argument("--host", help="the host that measured them (default: this one's name)")
    imp.add_argument("--collective", help="nccl-tests: the collective timed (default: from the file name)")
    imp.add_argument("--kernel-source", help="aiconfigurator tables: the rows of this kernel_source only (needed when "
                     "a file holds several kernels)")  # fmt: skip
    imp.add_argument("--timing-scope", choices=["kernel", "graph_replay", "wall_clock"], help="override the format's")
    imp.add_argument("--software", action="append", default=[], metavar="NAME=VERSION", help="repeatable")
    imp.add_argument("--batch-size", type=int, default=10_000, help="results per request (at most 10 000)")
    bench.set_defaults(func=cmd_benchmarks)

    emu = sub.add_parser(
        "emulate", help="serve an OpenAI-compatible endpoint that behaves as a planned deployment (docs/emulate.md)"
    )
    emu.add_argument("--deployment", help="JSON file: a POST /v1/estimate/serving body without its load")
    emu.add_argument("--model", help="catalogue model slug (overrides the file's)")
    emu.add_argument("--hardware", help="catalogue hardware slug (overrides the file's)")
    emu.add_argument("--host", default="127.0.0.1")
    emu.add_argument("--port", type=int, default=8001)
    emu.add_argument("--max-tokens", type=int, default=8192, help="longest request served, prompt and output")
    emu.add_argument("--default-output-tokens", type=int, default=256, help="when a request sets no max_tokens")
    emu.add_argument("--served-model-name", help="the model name answered (default: the model slug)")
    emu.set_defaults(func=cmd_emulate)
    return parser


def importer_formats() -> tuple[str, ...]:
    from measured.importer import FORMATS

    return FORMATS


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
