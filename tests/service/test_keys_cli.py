"""`ridgeline keys`: a key is printed once, stored only as its SHA-256, listed without it, and revoked."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from service.db import make_engine
from service.orm import ApiKey
from tests.conftest import ridgeline_command

pytestmark = pytest.mark.slow  # the CLI in subprocesses


def _run(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ridgeline_command(), *args, "--database-url", url], capture_output=True, text=True, timeout=120, check=False
    )


def test_create_list_revoke(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    assert _run("db", "upgrade", url=url).returncode == 0
    made = _run("keys", "create", "--name", "node-17", "--scope", "admin", url=url)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("rl_") and len(key) > 40 and "shown only this once" in made.stderr

    engine = make_engine(url)
    with engine.connect() as conn:
        (row,) = conn.execute(select(ApiKey.name, ApiKey.scope, ApiKey.key_sha256, ApiKey.prefix)).all()
    engine.dispose()
    assert (row.name, row.scope) == ("node-17", "admin")
    assert row.key_sha256 == hashlib.sha256(key.encode()).hexdigest()  # the key itself is nowhere
    assert key.split("_")[1] == row.prefix

    listed = _run("keys", "list", url=url)
    assert "node-17" in listed.stdout and row.prefix in listed.stdout and key not in listed.stdout
    assert _run("keys", "revoke", row.prefix, url=url).stdout.startswith("revoked API key 1 (node-17")
    again = _run("keys", "revoke", "node-17", url=url)
    assert again.returncode == 1 and "No live API key" in again.stderr
    bad = subprocess.run(
        [*ridgeline_command(), "keys", "create", "--name", "x", "--scope", "root"], capture_output=True
    )
    assert bad.returncode == 2
