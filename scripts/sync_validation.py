"""Copy the measured tables of ../shared/validation into the repository's own validation/ folder.

A developer command, never run by tests or the service (nothing at run or test time reads ../shared). New tables
arrive in ../shared/validation first; run this to carry them, then write or update the source's README.md in
validation/<source>/ (licence, commit, attribution, columns) and commit both.

Tables over GZIP_OVER bytes are stored gzip-compressed (`name.csv.gz`, mtime 0 so the bytes are reproducible);
readers open `name.csv` or `name.csv.gz` alike (`measured.datasets.open_table`).

    python scripts/sync_validation.py            # copy what is new or changed, print what it did
    python scripts/sync_validation.py --check    # exit 1 if the copy is behind ../shared/validation
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GZIP_OVER = 64 * 1024
SKIP = {"README.md"}  # ../shared's index; validation/README.md is the repository's own


def target_of(src: Path, shared: Path, dest: Path) -> Path:
    rel = src.relative_to(shared)
    if src.suffix == ".csv" and src.stat().st_size > GZIP_OVER:
        return dest / rel.with_name(rel.name + ".gz")
    return dest / rel


def content(src: Path, target: Path) -> bytes:
    data = src.read_bytes()
    if target.name.endswith(".gz") and not src.name.endswith(".gz"):
        return gzip.compress(data, compresslevel=9, mtime=0)
    return data


def same(src: Path, target: Path) -> bool:
    if not target.is_file():
        return False
    if target.name.endswith(".gz") and not src.name.endswith(".gz"):
        return gzip.decompress(target.read_bytes()) == src.read_bytes()
    return target.read_bytes() == src.read_bytes()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "validation")
    parser.add_argument("--dest", type=Path, default=REPO / "validation")
    parser.add_argument("--check", action="store_true", help="report what differs; change nothing")
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"no {args.shared}: nothing to copy from", file=sys.stderr)
        return 2
    behind = []
    for src in sorted(p for p in args.shared.rglob("*") if p.is_file()):
        if src.relative_to(args.shared).as_posix() in SKIP:
            continue
        target = target_of(src, args.shared, args.dest)
        if same(src, target):
            continue
        behind.append(target)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content(src, target))
        print(("differs: " if args.check else "copied: ") + str(target.relative_to(REPO)))
    for folder in sorted(p for p in args.dest.iterdir() if p.is_dir() and p.name != "LICENSES"):
        if not (folder / "README.md").is_file():
            print(f"no README.md (licence, commit, attribution) in {folder.relative_to(REPO)}", file=sys.stderr)
            behind.append(folder)
    if args.check and behind:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
