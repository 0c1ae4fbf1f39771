"""The planner's pages (`/ui`) used in a real headless Chromium against `ridgeline serve`, as a person uses them:
typed into with the keyboard, submitted with Enter or a click, hovered and clicked with the mouse, copied from.
Each test saves a screenshot of its page: to `$RIDGELINE_UI_SCREENSHOTS` when set (docs/ui/ is made that way, see
docs/ui.md), else to the test's temporary directory."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from bench.chromium import Page, chromium
from service import auth
from service.db import make_engine, make_sessionmaker
from service.examples import PLAN_EXAMPLES, TRACE_UPLOAD_EXAMPLES
from service.orm import Job
from tests.conftest import LiveServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]  # headless Chromium and a server process


def _shots(tmp_path: Path) -> Path:
    return Path(os.environ.get("RIDGELINE_UI_SCREENSHOTS") or tmp_path)


def _key(server: LiveServer, tmp_path: Path, scope: auth.Scope) -> str:
    """A key made on the server's database, as `ridgeline keys create` makes one."""
    engine = make_engine(f"sqlite:///{tmp_path / 'live.db'}")
    try:
        with make_sessionmaker(engine)() as session:
            key = auth.create_key(session, f"ui-{scope.value}", scope).key
            session.commit()
    finally:
        engine.dispose()
    return key


def _finish_job(tmp_path: Path, job_id: str, result: dict[str, Any]) -> None:
    """The job succeeded with `result`, written on the server's database as a runner writes it."""
    engine = make_engine(f"sqlite:///{tmp_path / 'live.db'}")
    try:
        with make_sessionmaker(engine)() as session:
            done = {"state": "succeeded", "result": result, "done": 1, "total": 1, "finished_at": datetime.now(UTC)}
            session.execute(update(Job).where(Job.id == job_id).values(**done))
            session.commit()
    finally:
        engine.dispose()


def _form_body(page: Page, form: str) -> Any:
    """The body the page's form sends (its inputs, read by the page's own code)."""
    return page.eval(f"ridgeline.collect(document.getElementById({json.dumps(form)}))")


def _submitted(page: Page, form: str) -> str:
    state: str = page.wait_for(
        f"(s => s === 'done' || s === 'error' ? s : '')(document.getElementById({json.dumps(form)}).dataset.state)"
    )
    return state


def test_plan_page(live_server: LiveServer, tmp_path: Path) -> None:
    with chromium() as page:
        page.call("Browser.grantPermissions", origin=live_server.url,
                  permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])  # fmt: skip
        page.goto(f"{live_server.url}/ui/plan")

        # A rate below zero, typed and submitted from the keyboard: the API's 422 appears beside that field.
        page.type_into("#f-traffic-requests_per_s", "-1")
        page.press_enter()
        assert _submitted(page, "plan-form") == "error"
        error = page.eval("document.querySelector('[data-error-for=\"traffic.requests_per_s\"]').textContent")
        refused = httpx.post(f"{live_server.url}/v1/plan", json=_form_body(page, "plan-form"), timeout=60).json()
        assert [d["field"] for d in refused["detail"]] == ["body.traffic.requests_per_s"]
        assert error == refused["detail"][0]["message"]
        assert error.startswith("Input should be greater than")
        assert page.eval("document.getElementById('f-traffic-requests_per_s').getAttribute('aria-invalid')") == "true"
        assert page.eval("document.activeElement.id") == "f-traffic-requests_per_s"  # focus moved to the field

        page.type_into("#f-traffic-requests_per_s", "20")
        # Disaggregated deployments too: 4 profiles × (4 tensor widths + 4² pool pairs × 3 ratios) × 5 max_num_seqs ×
        # 2 token budgets = 2080 candidates, over the 1500 a request answers: the plan is a job (202), which the page
        # follows at GET /v1/jobs/{id}. This server stores jobs without running them: the page says it is queued.
        page.click("#mode-disaggregated")
        page.click("#plan-form button[type=submit]")
        page.wait_for("document.getElementById('plan-form').dataset.state === 'job'")
        job_id = page.eval("document.getElementById('plan-form').dataset.job")
        status = page.eval("document.getElementById('plan-status').textContent")
        assert status.startswith(f"Queued as job {job_id}")
        assert page.eval("document.querySelector('[data-error-for=\"traffic.requests_per_s\"]').textContent") == ""
        job = httpx.get(f"{live_server.url}/v1/jobs/{job_id}", timeout=60).json()
        assert (job["kind"], job["state"]) == ("plan", "queued")
        # The job ends, stored here as a runner stores it (state, progress, the endpoint's answer: that of a small plan
        # the server computes now): the page, still polling, shows that answer as it shows a plan's.
        small = httpx.post(f"{live_server.url}/v1/plan", json=PLAN_EXAMPLES["impossible"]["value"], timeout=120)
        assert small.status_code == 200, small.text
        _finish_job(tmp_path, job_id, small.json())
        assert _submitted(page, "plan-form") == "done"
        assert page.eval("document.getElementById('plan-heading').textContent").startswith("No fleet meets")
        labels = page.eval("[...document.querySelectorAll('#fleets tbody tr')].map(r => r.cells[1].textContent)")
        assert labels == [c["label"] for c in small.json()["closest"]] and labels
        page.click("#mode-disaggregated")
        page.focus("#f-traffic-requests_per_s")
        page.press_enter()
        assert _submitted(page, "plan-form") == "done"
        # The page says how long the plan took (python -m bench.ui_plan measures it).
        assert page.eval("document.getElementById('plan-status').textContent").startswith("Done in ")

        body = _form_body(page, "plan-form")
        # The form's defaults are the README's planner example: 20 requests/s of 2048 + 256 tokens, four profiles.
        assert body["traffic"] == {"requests_per_s": 20, "prompt_tokens": 2048, "output_tokens": 256}
        prices = body["prices"]
        assert prices == {"a100-sxm-80gb": 1.8, "b200": 5.5, "h100-sxm": 2.9, "h200-sxm": 3.7}
        answer = httpx.post(f"{live_server.url}/v1/plan", json=body, timeout=120).json()
        fleets = answer["feasible"]
        assert fleets, answer

        rows = page.eval(
            "[...document.querySelectorAll('#fleets tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
        )
        assert [r[1] for r in rows] == [f["label"] for f in fleets]
        demand_tokens_per_hour = 20 * 256 * 3600  # 18.432 M output tokens an hour
        for row, fleet in zip(rows, fleets, strict=True):
            devices = int(row[3])
            assert devices == fleet["devices"]
            # $/hour is devices × the hardware's price per device hour typed in the form.
            cost = devices * prices[row[2]]
            assert row[4] == f"${cost:.2f}"
            assert row[5] == f"${cost / demand_tokens_per_hour * 1e6:.2f}"
            assert row[6].startswith(fleet["binding"]["objective"])
            assert row[7] == "yes"

        # The chart's points are the frontier's, by tokens/s per user.
        frontier = sorted(answer["frontier"], key=lambda p: p["output_tokens_per_s_per_user"])
        data = page.eval("ridgeline.frontier.plot.data")
        assert data[0] == pytest.approx([p["output_tokens_per_s_per_user"] for p in frontier])
        assert data[1] == pytest.approx([p["output_tokens_per_s_per_device"] for p in frontier])

        # Hover each point: its deployment is named; click one that is a listed fleet: its commands are shown.
        page.eval("ridgeline.frontier.plot.over.scrollIntoView({block: 'center'})")
        spots = page.eval(
            "(({plot}) => { const r = plot.over.getBoundingClientRect();"
            " return plot.data[0].map((x, i) =>"
            " [r.left + plot.valToPos(x, 'x'), r.top + plot.valToPos(plot.data[1][i], 'y')]);"
            " })(ridgeline.frontier)"
        )
        listed = {f["label"] for f in fleets}
        for (x, y), point in zip(spots, frontier, strict=True):
            page.mouse(x, y)
            assert page.eval("document.getElementById('frontier-hover').textContent").startswith(point["label"] + ":")
        chosen = next((i for i, p in enumerate(frontier) if p["label"] in listed), None)
        if chosen is not None:
            page.mouse(*spots[chosen], click=True)
            assert page.eval("document.getElementById('export-label').textContent") == frontier[chosen]["label"]
            expected = next(f for f in fleets if f["label"] == frontier[chosen]["label"])
        else:  # no frontier point among the listed fleets: a click says so
            page.mouse(*spots[0], click=True)
            assert "not among the fleets listed" in page.eval("document.getElementById('frontier-hover').textContent")
            page.click("#fleets tbody tr:first-child button")
            expected = fleets[0]

        # Copy the vLLM command: the clipboard holds exactly the API's command.
        page.click("#export-body .copy")
        page.wait_for("document.querySelector('#export-body .copy').dataset.copied === 'true'")
        assert page.eval("navigator.clipboard.readText()") == expected["export"]["vllm"][0]["command"]
        page.eval("window.scrollTo(0, 0)")
        page.screenshot(_shots(tmp_path) / "plan.png")


def test_plan_page_with_an_uploaded_trace(live_server: LiveServer, tmp_path: Path) -> None:
    key = _key(live_server, tmp_path, auth.Scope.upload)
    chat = TRACE_UPLOAD_EXAMPLES["application/json"]["chat-burst"]["value"]  # 4 requests, prompts 377-2048 tokens
    stored = httpx.post(f"{live_server.url}/v1/traces", json=chat, headers={"Authorization": f"Bearer {key}"})
    assert stored.status_code == 201, stored.text
    trace_id = stored.json()["id"]
    with chromium() as page:
        page.goto(f"{live_server.url}/ui/plan")
        page.click("#traffic-trace")
        # The lengths go with the other choice: dimmed, and not sent.
        assert page.eval("document.getElementById('f-traffic-prompt_tokens').closest('.field').className") == (
            "field inactive"
        )
        page.type_into("#f-traffic-trace_id", trace_id)
        page.press_enter()
        assert _submitted(page, "plan-form") == "done"
        body = _form_body(page, "plan-form")
        assert body["traffic"] == {"requests_per_s": 20, "trace_id": trace_id}  # the trace scaled to 20 requests/s
        answer = httpx.post(f"{live_server.url}/v1/plan", json=body, timeout=120).json()
        shown = answer["feasible"] or answer["closest"]
        labels = page.eval("[...document.querySelectorAll('#fleets tbody tr')].map(r => r.dataset.label)")
        assert labels == [c["label"] for c in shown]
        assert page.eval("document.getElementById('plan-summary').textContent").startswith(
            "llama-3-70b at 20 requests/s, p90:"
        )


def test_serving_page(live_server: LiveServer, tmp_path: Path) -> None:
    with chromium() as page:
        page.goto(f"{live_server.url}/ui/serving")
        page.click("#serving-form button[type=submit]")
        assert _submitted(page, "serving-form") == "done"
        body = _form_body(page, "serving-form")
        assert body["series"] is True and body["load"]["rate_per_s"] == 8 and "concurrency" not in body["load"]
        answer = httpx.post(f"{live_server.url}/v1/estimate/serving", json=body, timeout=120).json()
        series = answer["series"]
        assert series
        charts = page.eval("Object.fromEntries(Object.entries(ridgeline.serving).map(([k, u]) => [k, u.data]))")
        times = [p["start_s"] for p in series]
        assert charts["batch"] == [times, [p["decoding"] for p in series]]
        assert charts["kv"][1] == pytest.approx([p["kv_cache_use"] for p in series])
        assert max(charts["batch"][1]) <= 64  # never more sequences than the engine's max_num_seqs
        assert all(0 <= u <= 1 for u in charts["kv"][1])
        rows = page.eval(
            "[...document.querySelectorAll('#serving-latency tbody tr')].map(r => [...r.cells].map(c => c.textContent))"
        )
        assert [r[0] for r in rows] == ["TTFT (s)", "TPOT (s)", "Queue (s)", "End to end (s)"]
        assert float(rows[0][3]) == pytest.approx(answer["ttft_s"]["p90"], rel=1e-2)  # three significant digits
        page.eval("window.scrollTo(0, 0)")
        page.screenshot(_shots(tmp_path) / "serving.png")

        # A closed loop instead: the form sends the clients and no rate.
        page.click("#load-closed")
        page.click("#serving-form button[type=submit]")
        assert _submitted(page, "serving-form") == "done"
        closed = _form_body(page, "serving-form")["load"]
        assert closed == {"concurrency": 32, "requests": 400, "prompt_tokens": {"value": 1024},
                          "output_tokens": {"value": 256}}  # fmt: skip
        # At most 32 requests in the system, so at most 32 sequences decoding at once.
        assert 0 < max(page.eval("ridgeline.serving.batch.data[1]")) <= 32


def test_accuracy_page(live_server: LiveServer, tmp_path: Path) -> None:
    key = _key(live_server, tmp_path, auth.Scope.upload)
    results = [
        {"op": {"kind": "elementwise", "elements": 100_000_000, "dtype": "bf16"}, "median_s": t}
        for t in (250e-6, 200e-6)
    ] + [
        {"op": {"kind": "matmul", "m": n, "n": n, "k": n, "dtype": "bf16"}, "median_s": t}
        for n, t in ((1024, 1.6e-5), (2048, 6.9e-5), (4096, 5.43e-4), (8192, 4.3e-3))
    ]
    upload = httpx.post(
        f"{live_server.url}/v1/benchmarks",
        headers={"Authorization": f"Bearer {key}"},
        json={"hardware": "NVIDIA A100-SXM4-80GB", "host": "node-1", "software": {"cuda": "12.4"},
              "timing_scope": "graph_replay", "results": results},
        timeout=60,
    )  # fmt: skip
    assert upload.status_code == 201, upload.text
    with chromium() as page:
        page.goto(f"{live_server.url}/ui/accuracy?hardware=a100-sxm-80gb")
        points = page.eval("ridgeline.accuracy.points")
        data = page.eval("ridgeline.accuracy.plot.data")
        assert sorted(data[1]) == sorted(r["median_s"] for r in results)  # every measured time is a point
        assert data[2] == data[0]  # the y = x line
        assert data[3] == pytest.approx([p["predicted_s"] * p["low"] for p in points])
        inside = sum(p["predicted_s"] * p["low"] <= p["measured_s"] <= p["predicted_s"] * p["high"] for p in points)
        assert page.eval("document.getElementById('accuracy-inside').textContent").startswith(f"{inside} of 6 ")
        # Hover the largest prediction (the 8192³ matmul, sorted last): its result is named.
        page.eval("ridgeline.accuracy.plot.over.scrollIntoView({block: 'center'})")
        x, y = page.eval(
            "(({plot}) => { const r = plot.over.getBoundingClientRect(); const i = plot.data[0].length - 1;"
            " return [r.left + plot.valToPos(plot.data[0][i], 'x'), r.top + plot.valToPos(plot.data[1][i], 'y')]; })"
            "(ridgeline.accuracy)"
        )
        page.mouse(x, y)
        hovered = page.eval("document.getElementById('accuracy-hover').textContent")
        assert "a100-sxm-80gb matmul bf16, measured 4.3 ms" in hovered, hovered
        page.wait_for("(i => i.complete && i.naturalWidth > 0)(document.getElementById('roofline-chart'))")
        page.screenshot(_shots(tmp_path) / "accuracy.png")


def test_catalogue_page(live_server: LiveServer, tmp_path: Path) -> None:
    key = _key(live_server, tmp_path, auth.Scope.catalogue)
    with chromium() as page:
        page.goto(f"{live_server.url}/ui/catalogue")
        assert page.eval("document.querySelectorAll('details.entry').length") == len(
            httpx.get(f"{live_server.url}/v1/hardware", params={"limit": 200}).json()["items"]
        )
        page.eval("document.getElementById('hw-h100-sxm').open = true")  # one profile's figures and sources
        page.screenshot(_shots(tmp_path) / "catalogue.png", max_height=1800)

        # No key: the 401 appears beside the key field.
        page.click("#add-hardware button[type=submit]")
        assert _submitted(page, "add-hardware") == "error"
        assert page.eval("document.getElementById('hardware-key-error').textContent").startswith("401: ")

        # A key and a negative bandwidth: the 422 names the figure, beside the document.
        page.type_into("#hardware-key", key)
        page.eval(
            "(t => { const d = JSON.parse(t.value); d.memory.device.bandwidth_bytes_per_s = -1;"
            " t.value = JSON.stringify(d, null, 2); })(document.getElementById('hardware-document'))"
        )
        page.click("#add-hardware button[type=submit]")
        assert _submitted(page, "add-hardware") == "error"
        message = page.eval("document.getElementById('hardware-document-error').textContent")
        assert message.startswith("memory.device.bandwidth_bytes_per_s: Input should be greater than")

        # A slug with a space: beside the slug field.
        page.eval(
            "(t => { const d = JSON.parse(t.value); d.memory.device.bandwidth_bytes_per_s = 5e12;"
            " t.value = JSON.stringify(d, null, 2); })(document.getElementById('hardware-document'))"
        )
        page.type_into("#hardware-slug", "my h100")
        page.click("#add-hardware button[type=submit]")
        assert _submitted(page, "add-hardware") == "error"
        assert page.eval("document.getElementById('hardware-slug-error').textContent")
        assert page.eval("document.getElementById('hardware-document-error').textContent") == ""

        page.type_into("#hardware-slug", "h100-sxm-5tbs")
        page.click("#add-hardware button[type=submit]")
        assert _submitted(page, "add-hardware") == "done"
        page.goto(f"{live_server.url}/ui/catalogue")
        # The new profile, with its figure cited as the document says (figure_sources: WHAT-IF).
        row = page.eval(
            "[...document.querySelectorAll('#hw-h100-sxm-5tbs tr')].map(r => r.textContent)"
            ".find(t => t.includes('memory.device.bandwidth_bytes_per_s'))"
        )
        assert "5e12" in row and "[WHAT-IF]" in row
