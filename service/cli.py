"""`ridgeline`: serve the API, migrate the database, load the catalogue."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Sequence

from hardware_db import CatalogueError, load_hardware, load_models
from service.settings import Settings

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
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=settings.log_level,
        timeout_graceful_shutdown=args.graceful_shutdown_s,
        proxy_headers=True,
    )
    return 0


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
