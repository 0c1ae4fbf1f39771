"""Swagger UI renders in a real headless Chromium with no internet: its assets come from the service itself."""

from __future__ import annotations

import shutil
import subprocess
import tempfile

import pytest

from tests.conftest import LiveServer

pytestmark = pytest.mark.slow  # headless Chromium

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _dump_dom(url: str) -> str:
    if not shutil.which(CHROMIUM):
        pytest.fail("headless Chromium is required (Debian package `chromium`; scripts/test.sh installs it)")
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--virtual-time-budget=15000", "--dump-dom", url,
            ],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.browser
def test_swagger_ui_renders_every_operation(live_server: LiveServer) -> None:
    dom = _dump_dom(f"{live_server.url}/docs")
    # Operations are rendered by JavaScript from /openapi.json: their presence proves the bundle loaded and ran.
    for method, path in [
        ("get", "/v1/hardware"),
        ("post", "/v1/hardware"),
        ("get", "/v1/hardware/{slug}"),
        ("patch", "/v1/hardware/{slug}"),
        ("delete", "/v1/hardware/{slug}"),
        ("get", "/v1/models"),
        ("get", "/healthz"),
    ]:
        assert f'data-path="{path}"' in dom, path
        assert f"opblock-{method}" in dom, method
    assert "List hardware profiles, built-in and user-added." in dom  # the docstring summary
    assert "Failed to load API definition" not in dom
