"""The planner's pages (`/ui`) as the server renders them: every page answers HTML with the catalogue's entries, every
form control has a label, every asset is the service's own, and the accuracy page shows the stored results.

The pages are driven end to end in a real browser in tests/service/test_ui_browser.py."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient

from tests.service.test_accuracy_and_charts import PREDICTED
from tests.service.test_benchmarks import elementwise, keys, run_body, upload
from tests.service.test_calibrations import calibrate, upload_planted

__all__ = ["keys"]

PAGES = ["/ui/plan", "/ui/serving", "/ui/accuracy", "/ui/catalogue"]


class Controls(HTMLParser):
    """The form controls of a page, the labels' `for`, and every asset it loads."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[dict[str, str | None]] = []
        self.labelled: set[str] = set()
        self.assets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("input", "select", "textarea") and a.get("type") != "hidden":
            self.controls.append(a)
        if tag == "label" and a.get("for"):
            self.labelled.add(str(a["for"]))
        if tag == "script" and a.get("src"):
            self.assets.append(str(a["src"]))
        if tag == "link" and a.get("rel") == "stylesheet":
            self.assets.append(str(a["href"]))
        if tag == "img":
            self.assets.append(str(a["src"]))


def _parse(html: str) -> Controls:
    parser = Controls()
    parser.feed(html)
    return parser


def test_pages_render_with_labelled_controls_and_local_assets(client: TestClient) -> None:
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/plan"
    for path in PAGES:
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:500])
        assert response.headers["content-type"].startswith("text/html")
        page = _parse(response.text)
        assert page.controls, path
        for control in page.controls:  # each one named by a <label for=…> (its id), so that a reader says what it is
            assert control.get("id") in page.labelled, (path, control)
        for asset in page.assets:  # offline: nothing from another host
            assert asset.startswith("/"), (path, asset)
            assert client.get(asset).status_code == 200, (path, asset)
    # The vendored chart library comes with its licence.
    licence = client.get("/ui/static/uplot/LICENSE")
    assert licence.status_code == 200 and "The MIT License" in licence.text
    assert not any(p.startswith("/ui") for p in client.get("/openapi.json").json()["paths"])  # pages, not API


def test_plan_and_serving_pickers_list_the_catalogue(client: TestClient) -> None:
    hardware = [h["slug"] for h in client.get("/v1/hardware", params={"limit": 200}).json()["items"]]
    models = [m["slug"] for m in client.get("/v1/models", params={"limit": 200}).json()["items"]]
    assert "h100-sxm" in hardware and "llama-3-70b" in models
    plan = client.get("/ui/plan").text
    for slug in hardware:
        assert f'id="hw-{slug}"' in plan and f'data-path="prices.{slug}"' in plan
    for slug in models:
        assert f'<option value="{slug}"' in plan
    # The README's planner example is the form's default: llama-3-70b on four profiles at their example prices.
    assert re.search(r'<option value="llama-3-70b"\s+selected>', plan)
    for slug in ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200"):
        assert re.search(rf'id="hw-{slug}"[^>]*checked', plan), slug
    serving = client.get("/ui/serving").text
    for slug in hardware:
        assert f'<option value="{slug}"' in serving


def test_catalogue_page_cites_every_figure(client: TestClient) -> None:
    html = client.get("/ui/catalogue").text
    a100 = html[html.index('id="hw-a100-sxm-80gb"') :]
    a100 = a100[: a100.index("</details>")]
    # hardware_db/hardware/a100-sxm-80gb.yaml: memory.device.bandwidth_bytes_per_s 2039e9, from figure_sources'
    # `memory.device: GK-A100` (the most specific entry covering it).
    cell = r"<code>memory\.device\.bandwidth_bytes_per_s</code></td><td[^>]*>([^<]+)</td>\s*<td>(.*?)</td>"
    row = re.search(cell, a100)
    assert row is not None
    assert row.group(1) == "2.039e12"
    assert "Glenn Lockwood, A100 notes" in row.group(2) and "[GK-A100]" in row.group(2)
    # Its tile candidates (the same file: 256×128 first, 64×64 last), as a person reads them.
    assert '<td class="num">256×128, 128×256, 128×128, 128×64, 64×128, 64×64</td>' in a100
    # Every figure row names a source key.
    figures = re.findall(r"<small>\[([^\]]*)\]</small>", a100)
    assert figures and all(figures)
    assert 'id="model-llama-3-70b"' in html
    # The add forms: a key field each, and the API's own example as the document to start from.
    assert html.count('name="api_key"') == 2
    assert "h100-sxm-5tbs" in html and "&#34;figure_sources&#34;" in html


@pytest.mark.databases  # reads stored results
def test_accuracy_page_shows_each_result_against_its_prediction(client: TestClient, keys: dict[str, str]) -> None:
    empty = client.get("/ui/accuracy").text
    assert 'id="accuracy-empty"' in empty and 'id="calibrations-empty"' in empty
    results = [{"op": elementwise(100_000_000), "median_s": t} for t in (250e-6, 200e-6)]
    assert upload(client, keys["upload"], run_body(results)).status_code == 201
    html = client.get("/ui/accuracy", params={"hardware": "a100-sxm-80gb"}).text
    blob = re.search(r'<script type="application/json" id="accuracy-points">(.*?)</script>', html, re.S)
    assert blob is not None
    points = json.loads(blob.group(1))
    # tests/service/test_accuracy_and_charts.py: predicted 2.5 µs + p3(6.41 µs, 230.02 µs) = 232.52 µs.
    assert [p["measured_s"] for p in points] == [250e-6, 200e-6]
    assert [p["predicted_s"] for p in points] == pytest.approx([PREDICTED] * 2)
    for p in points:  # an 80 % interval straddles the prediction; an elementwise op takes its family's band
        assert p["low"] < 1 < p["high"]
        assert p["band"].startswith("elementwise/*"), p["band"]
    # Median |predicted / measured − 1| over −7.0 % and +16.3 %: 11.7 %.
    median = (abs(PREDICTED / 250e-6 - 1) + abs(PREDICTED / 200e-6 - 1)) / 2
    assert f"median\n  error {100 * median:.1f} % raw" in html
    assert 'src="/v1/roofline/a100-sxm-80gb.svg?dtype=bf16"' in html
    assert "<td>a100-sxm-80gb</td><td>elementwise</td><td>bf16</td><td>1e8–1e9 B</td>" in html


@pytest.mark.databases  # reads stored results and calibrations
def test_accuracy_page_shows_what_a_calibration_changed(client: TestClient, keys: dict[str, str]) -> None:
    # tests/service/test_calibrations.py: 60 elementwise ops timed at 4 µs + 1.25 × the modelled work; a fit on 45 of
    # them recovers that exactly, so the 15 held out go from too fast (the raw model) to 0.0 % error.
    upload_planted(client, keys["upload"])
    fitted = calibrate(client, keys["admin"], op_families=["elementwise"], holdout_fraction=0.25, seed=7)
    assert fitted.status_code == 201, fitted.text
    cal = fitted.json()
    html = client.get("/ui/accuracy", params={"hardware": "a100-sxm-80gb"}).text
    row = re.search(
        rf"<tr><td>{cal['id']}</td><td>a100-sxm-80gb</td><td>1</td><td>elementwise</td>(.*?)</tr>", html, re.S
    )
    assert row is not None
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(1))
    before = f"{100 * cal['before']['median_ape']:.1f} %"
    assert cells[:3] == ["15", before, "0.0 %"]
    # Raw: (2.5 µs + w) / (4 µs + 1.25 w) − 1, from −37.5 % (w → 0) to −20 % (w → ∞) on every op.
    assert 20 <= float(before.split()[0]) <= 37.5
    blob = re.search(r'<script type="application/json" id="accuracy-points">(.*?)</script>', html, re.S)
    assert blob is not None
    for p in json.loads(blob.group(1)):  # each result's calibrated prediction is its planted (measured) time
        assert p["calibrated_s"] == pytest.approx(p["measured_s"], rel=1e-6)


def test_accuracy_page_for_a_profile_not_in_the_catalogue(client: TestClient) -> None:
    html = client.get("/ui/accuracy", params={"hardware": "nope"}).text
    assert 'id="accuracy-empty"' in html and "roofline-chart" not in html  # no chart that would answer 404


def test_bad_query_is_a_422_naming_it(client: TestClient) -> None:
    response = client.get("/ui/accuracy", params={"hardware": "x" * 65})
    assert response.status_code == 422
    assert response.json()["detail"][0]["field"] == "query.hardware"
