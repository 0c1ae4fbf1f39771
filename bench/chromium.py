"""Headless Chromium driven over the DevTools protocol (the protocol Chromium itself serves: no other browser driver),
to use a page as a person does: type, press keys, move and click the mouse, read the clipboard, take a screenshot.
Used by `bench.ui_plan` and by tests/service/test_ui_browser.py."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, HEIGHT = 1280, 900


class Page:
    """One tab: `call` sends a protocol command and returns its result."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.sent = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.sent += 1
        self.socket.send(json.dumps({"id": self.sent, "method": method, "params": params}))
        while True:  # events arrive between answers; the tests read the page's state instead
            message = json.loads(self.socket.recv(timeout=120))
            if message.get("id") == self.sent:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result

    def eval(self, expression: str) -> Any:
        """The value of a JavaScript expression (a promise is awaited); a thrown error fails the test."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 120) -> Any:
        """Wait until the expression is truthy (polled every 50 ms: the condition, never a fixed sleep)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"not true within {timeout_s} s: {expression}")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && window.ridgeline && window.ridgeline.ready === true")

    def focus(self, selector: str) -> None:
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")

    def type_into(self, selector: str, text: str) -> None:
        """Focus a field, select what it holds and type over it, as the keyboard does."""
        self.eval(f"(e => {{ e.focus(); e.select(); }})(document.querySelector({json.dumps(selector)}))")
        self.call("Input.insertText", text=text)

    def press_enter(self) -> None:
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13,
                      text="\r" if kind == "keyDown" else "")  # fmt: skip

    def mouse(self, x: float, y: float, click: bool = False) -> None:
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        if click:
            for kind in ("mousePressed", "mouseReleased"):
                self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def click(self, selector: str) -> None:
        """A real mouse click at the middle of the element (scrolled into view first)."""
        box = self.eval(
            f"(e => {{ e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();"
            f" return [r.x + r.width / 2, r.y + r.height / 2]; }})(document.querySelector({json.dumps(selector)}))"
        )
        self.mouse(box[0], box[1], click=True)

    def screenshot(self, path: Path, max_height: int = 3200) -> None:
        """The page from its top, as tall as its content up to `max_height` CSS pixels."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": WIDTH, "height": min(size["height"], max_height), "scale": 1},
        )  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))


@contextmanager
def chromium() -> Iterator[Page]:
    """A fresh headless Chromium with no network but the test's server, and its first tab."""
    if not shutil.which(CHROMIUM):
        raise RuntimeError("headless Chromium is required (Debian package `chromium`; scripts/test.sh installs it)")
    # Chromium's helper processes may still be leaving files in the profile as it is removed.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--remote-debugging-port=0", f"--window-size={WIDTH},{HEIGHT}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            active = Path(profile) / "DevToolsActivePort"  # Chromium writes its port here once it listens
            deadline = time.monotonic() + 60
            while not (active.exists() and active.read_text().count("\n") >= 1):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Chromium did not start (exit {proc.poll()})")
                time.sleep(0.05)
            port = active.read_text().splitlines()[0]
            tabs = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            url = next(t["webSocketDebuggerUrl"] for t in tabs if t["type"] == "page")
            with connect(url, max_size=64 * 2**20, open_timeout=30) as socket:
                page = Page(socket)
                page.call("Page.enable")
                page.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1,
                          mobile=False)  # fmt: skip
                yield page
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
