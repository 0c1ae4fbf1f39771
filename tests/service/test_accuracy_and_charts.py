"""GET /v1/accuracy and the roofline charts, on SQLite and PostgreSQL; the SVG as a browser shows it.

Hand-worked figures as in tests/service/test_benchmarks.py: a 1e8-element bf16 elementwise op on the A100 is
predicted at 2.5 µs + p3(6.41 µs, 230.02 µs) = 232.52 µs (graph replay) and moves 4e8 bytes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from matplotlib.image import imread

from tests.service.test_benchmarks import BW, VECTOR, elementwise, keys, p3, run_body, upload

pytestmark = pytest.mark.databases  # storage: every test here runs on SQLite and PostgreSQL

__all__ = ["keys"]

PREDICTED = 2.5e-6 + p3(1e8 / VECTOR, 4e8 / BW)


def test_accuracy_per_family_and_size(client: TestClient, keys: dict[str, str]) -> None:
    results = [{"op": elementwise(100_000_000), "median_s": t} for t in (250e-6, 200e-6)]
    upload(client, keys["upload"], run_body(results))
    response = client.get("/v1/accuracy", params={"hardware": "a100-sxm-80gb", "worst": 1})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["results"] == 2
    (group,) = report["groups"]
    assert (group["family"], group["dtype"], group["size"]) == ("elementwise", "bf16", "1e8–1e9 B")
    low, high = PREDICTED / 250e-6 - 1, PREDICTED / 200e-6 - 1  # −7.0 % and +16.3 %
    raw = group["raw"]
    assert raw["count"] == 2
    assert raw["median_ape"] == pytest.approx((abs(low) + high) / 2)
    assert raw["p90_ape"] == pytest.approx(abs(low) + 0.9 * (high - abs(low)))  # numpy's linear percentile
    assert raw["bias"] == pytest.approx((low + high) / 2)
    assert group["calibrated"]["count"] == 0  # no calibration yet
    assert [w["measured_s"] for w in group["worst"]] == [200e-6]  # +16.3 % is the worse of the two
    assert client.get("/v1/accuracy", params={"op_kind": "matmul"}).json()["results"] == 0


def test_roofline_png_and_svg(client: TestClient, keys: dict[str, str]) -> None:
    upload(client, keys["upload"], run_body([{"op": elementwise(100_000_000), "median_s": 250e-6}]))
    png = client.get("/v1/roofline/a100-sxm-80gb.png", params={"dtype": "bf16"})
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    svg = client.get("/v1/roofline/a100-sxm-80gb.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert b"<svg" in svg.content[:2000]
    assert client.get("/v1/roofline/nope.svg").status_code == 404
    bad = client.get("/v1/roofline/a100-sxm-80gb.png", params={"dtype": "fp7"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "query.dtype"


@pytest.mark.slow  # headless Chromium
@pytest.mark.browser
def test_svg_chart_renders_in_a_browser(client: TestClient, keys: dict[str, str], tmp_path: Path) -> None:
    """Headless Chromium draws the SVG: the matrix roof's red and the vector roof's blue are on the screenshot."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("headless Chromium is required (Debian package `chromium`; scripts/test.sh installs it)")
    svg = tmp_path / "roofline.svg"
    svg.write_bytes(client.get("/v1/roofline/a100-sxm-80gb.svg").content)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1150,740",
         f"--screenshot={shot}", svg.as_uri()],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    pixels = imread(shot)[..., :3]
    red = (pixels[..., 0] > 0.6) & (pixels[..., 1] < 0.2) & (pixels[..., 2] < 0.25)  # #B2182B
    blue = (pixels[..., 0] < 0.25) & (pixels[..., 1] > 0.3) & (pixels[..., 1] < 0.5) & (pixels[..., 2] > 0.6)  # #2166AC
    assert red.sum() > 500 and blue.sum() > 500
