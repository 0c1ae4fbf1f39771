"""Progress as a person sees it: a bar in a terminal, plain lines in a log."""

from __future__ import annotations

import io

from worker.progress import Progress


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(12, out, tty=False)
    progress.step("matmul: 64³", "median 1 ms")
    progress.note("skipped attention: cudnn")
    progress.step("matmul: 128³")
    progress.close()
    assert out.getvalue() == "[ 1/12] matmul: 64³  median 1 ms\nskipped attention: cudnn\n[ 2/12] matmul: 128³\n"
    assert "\r" not in out.getvalue()


def test_a_bar_redrawn_in_place_on_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(4, out, tty=True, width=8)
    progress.step("a")
    progress.step("b")
    text = out.getvalue()
    assert text.startswith("\r##------ [1/4] a")
    assert "\r####---- [2/4] b" in text
    progress.note("a warning")
    progress.close()
    assert "a warning\n" in out.getvalue()
