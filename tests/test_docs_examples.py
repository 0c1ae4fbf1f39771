"""Every request example in README.md and docs/**/*.md runs against the service, and every figure its answer shows is
the service's answer to the digits shown: a change that moves a figure fails here until the doc says what it answers.

The convention (AGENTS.md, "Commits"), kept small so that nothing escapes it:

- An example is a command in a fenced ```bash block that calls `curl`, alone or piped through `python3 -c '…'` and
  `head`: `curl -s [-o FILE] [-X METHOD] 'http://127.0.0.1:8000/PATH?QUERY' [-H 'Name: value'] … [-d 'JSON' | -d @- |
  --data-binary @FILE]`; or `ridgeline benchmarks import …`, run by the command line itself over this test's client,
  on every IMPORT_EVERY-th row of its table (the whole table takes longer than this test may). A block that holds an
  example holds nothing but examples, comments, blank lines and keys made on the host: `NAME=$(ridgeline keys create
  --name N --scope S | tail -n 1)`, also run by the command line.
- Its answer, when one is shown, is the comment right below it: `# {…}`, `# STATUS {…}` or `# STATUS`, continued on
  `#  …` lines until its brackets close. `…` elides a value (`"time_s":…`), an object's other members
  (`{…,"cache":"warm",…}`), a list's further items (`[{…},…]`) or part of a string (`"tr_…"`). A figure is compared
  to the digits shown: 3.90 is the answer rounded to 2 decimals, 1.83e-4 to 3 significant digits, 872 to an integer;
  strings, booleans and null exactly; an object without `…` has exactly the members shown. No status shown: a 2xx.
- In a request, a string holding `…` stands for the `id` of the latest answer it matches (`"tr_…"`: the trace
  uploaded above it), and `$NAME` for a key made above.
- What the runner cannot read fails: a `curl` in prose or outside a ```bash block, an option or a pipeline stage it
  does not know, an answer it cannot parse, and, in a block of examples, a comment that is not an answer but holds a
  JSON member (an answer that would escape the check). Another command that talks to the service (`--server`,
  `127.0.0.1:8000`) is listed in EXCLUDED with the reason it cannot run here.

Each document runs in order on one client, from a clean slate (no stored runs, keys, calibrations, traces or entries
of one's own: ids count from 1, as on a new server). docs/decisions/ is read like the rest: its records hold no
request examples today, and one that is added is checked like any other.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Integer, delete, func, select

from service import cli
from service.app import create_app
from service.examples import TRACE_UPLOAD_EXAMPLES
from service.orm import Base, HardwareProfile, HardwareProfileVersion, ModelConfig, ModelConfigVersion
from service.settings import Settings
from tests.conftest import REPO

DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
SERVER = "http://127.0.0.1:8000"

# Commands that talk to the service but cannot run in this test, by document and the start of the command.
EXCLUDED = {
    ("docs/worker.md", "ridgeline-worker detect"): "reads the host's accelerator, for a deployed service",
    ("docs/worker.md", "ridgeline-worker run"): "times kernels on the host's accelerator (tests/scripts/"
    "test_device_e2e.py runs the whole loop on a CPU)",
    ("docs/worker.md", "ridgeline-worker flush"): "sends a worker's spool to a deployed service",
}
IMPORT_EVERY = 50  # an imported table's rows: the first of every 50 (185 of the A100's 9 240 bf16 GEMMs)

# The files examples send (`--data-binary @FILE`), made here: the rows of the API's own example of that format.
FILES = {"AzureLLMInferenceTrace_code.csv": TRACE_UPLOAD_EXAMPLES["text/csv"]["azure"]["value"]}

ELLIPSIS = "…"
KEY = re.compile(r"(?P<var>[A-Z_]+)=\$\((?:\.venv/bin/)?ridgeline (?P<args>keys create [^|]*) \| tail -n 1\)")
IMPORT = re.compile(r"(?:\.venv/bin/)?ridgeline (benchmarks import\s.*)", re.DOTALL)
CURL_IN_PROSE = re.compile(r"\bcurl\s+(-|'?https?:|localhost)")
TALKS_TO_SERVICE = re.compile(r"--server\b|127\.0\.0\.1:8000|localhost:8000")
JSON_MEMBER = re.compile(r'"[^"]*"\s*:\s*[-\d"\[{…]')
DECODER = json.JSONDecoder()  # reads one JSON string of an answer
NUMBER = re.compile(r"-?(\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?")


class DocFormatError(Exception):
    """An example the runner cannot read."""


# ---------------------------------------------------------------------------------------------------------- answers


class _Elided:
    def __repr__(self) -> str:
        return ELLIPSIS


ELIDED = _Elided()


@dataclass(frozen=True)
class Figure:
    text: str


@dataclass
class Obj:
    members: dict[str, Any]
    more: bool  # `…` among the members: the answer may hold others


@dataclass
class Arr:
    items: list[Any]
    more: bool  # a last item `…`: the answer may hold more items


class _Parser:
    """JSON, with `…` for a value, for an object's other members and for a list's further items."""

    def __init__(self, text: str) -> None:
        self.text, self.i = text, 0

    def peek(self) -> str:
        while self.i < len(self.text) and self.text[self.i].isspace():
            self.i += 1
        return self.text[self.i] if self.i < len(self.text) else ""

    def fail(self, what: str) -> DocFormatError:
        return DocFormatError(f"cannot read the answer: {what} at {self.text[self.i : self.i + 30]!r}")

    def take(self, expected: str) -> None:
        if self.peek() != expected:
            raise self.fail(f"expected {expected!r}")
        self.i += 1

    def value(self) -> Any:
        ch = self.peek()
        if ch == "{":
            return self.obj()
        if ch == "[":
            return self.arr()
        if ch == '"':
            value, self.i = DECODER.raw_decode(self.text, self.i)
            return value
        if ch == ELLIPSIS:
            self.i += 1
            return ELIDED
        number = NUMBER.match(self.text, self.i)
        if number:
            if number.group(3) is not None and len(number.group(1)) != 1:
                raise self.fail("a figure in scientific notation has one digit before its point")
            self.i = number.end()
            return Figure(number.group())
        for word, literal in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.i):
                self.i += len(word)
                return literal
        raise self.fail("not a value")

    def obj(self) -> Obj:
        self.take("{")
        found = Obj({}, more=False)
        if self.peek() == "}":
            self.i += 1
            return found
        while True:
            if self.peek() == ELLIPSIS:
                self.i += 1
                found.more = True
            else:
                if self.peek() != '"':
                    raise self.fail("expected a member")
                key, self.i = DECODER.raw_decode(self.text, self.i)
                self.take(":")
                found.members[key] = self.value()
            if self.peek() == "}":
                self.i += 1
                return found
            self.take(",")

    def arr(self) -> Arr:
        self.take("[")
        found = Arr([], more=False)
        if self.peek() == "]":
            self.i += 1
            return found
        while True:
            if self.peek() == ELLIPSIS:
                self.i += 1
                found.more = True
                self.take("]")
                return found
            found.items.append(self.value())
            if self.peek() == "]":
                self.i += 1
                return found
            self.take(",")


def parse_answer(text: str) -> Any:
    parser = _Parser(text)
    pattern = parser.value()
    if parser.peek():
        raise parser.fail("text after the answer")
    return pattern


def figure_matches(shown: str, actual: Any) -> bool:
    """Whether `actual` is `shown` to the digits shown: decimals, significant digits, or an integer."""
    if isinstance(actual, bool) or not isinstance(actual, int | float):
        return False
    number = NUMBER.fullmatch(shown)
    assert number is not None
    decimals, exponent = number.group(2) or "", number.group(3)
    if exponent is not None:
        return float(f"{actual:.{len(decimals)}e}") == float(shown)
    if number.group(2) is not None:
        return float(f"{actual:.{len(decimals)}f}") == float(shown)
    return actual == int(shown) if isinstance(actual, int) else round(actual) == int(shown)


def compare(pattern: Any, actual: Any, where: str = "") -> list[str]:
    """What differs between an answer as a doc shows it and the service's answer, one line per difference."""
    at = where or "the answer"
    if pattern is ELIDED:
        return []
    if isinstance(pattern, Obj):
        if not isinstance(actual, dict):
            return [f"{at}: an object shown, {actual!r} answered"]
        problems = []
        for key, value in pattern.members.items():
            path = f"{where}.{key}" if where else key
            problems += compare(value, actual[key], path) if key in actual else [f"{path}: shown, not answered"]
        extra = [key for key in actual if key not in pattern.members]
        if extra and not pattern.more:
            problems.append(f"{at}: also answers {extra}: show them, or elide with …")
        return problems
    if isinstance(pattern, Arr):
        if not isinstance(actual, list):
            return [f"{at}: a list shown, {actual!r} answered"]
        if len(actual) < len(pattern.items) or (len(actual) > len(pattern.items) and not pattern.more):
            return [f"{at}: {len(pattern.items)} items shown, {len(actual)} answered"]
        return [p for i, item in enumerate(pattern.items) for p in compare(item, actual[i], f"{where}[{i}]")]
    if isinstance(pattern, Figure):
        return [] if figure_matches(pattern.text, actual) else [f"{at}: shown {pattern.text}, answered {actual!r}"]
    if isinstance(pattern, str) and ELLIPSIS in pattern:
        regex = ".*".join(map(re.escape, pattern.split(ELLIPSIS)))
        ok = isinstance(actual, str) and re.fullmatch(regex, actual, re.DOTALL) is not None
        return [] if ok else [f"{at}: shown {pattern!r}, answered {actual!r}"]
    same = type(actual) is type(pattern) and actual == pattern
    return [] if same else [f"{at}: shown {json.dumps(pattern)}, answered {json.dumps(actual)}"]


# ---------------------------------------------------------------------------------------------------------- reading


@dataclass
class Curl:
    method: str
    path: str
    headers: dict[str, str]
    data: str | None  # the body as written; `@-` and `@FILE` read stdin or a file
    binary: bool  # --data-binary: sent as it is (curl -d drops a file's line breaks)
    output: str | None


@dataclass
class Example:
    doc: str
    line: int
    command: str
    stages: list[Curl | str] = field(default_factory=list)  # a curl, `python3 -c` code, or "head"
    cli: list[str] | None = None  # instead: the arguments of a `ridgeline` command
    key: str | None = None  # … whose last line is this key: `NAME=$(ridgeline keys create …)`
    status: int | None = None  # the answer shown
    answer: Any = None
    answered: bool = False

    def kind(self) -> str | None:
        command = self.command.strip()
        if KEY.fullmatch(command):
            return "key"
        if IMPORT.fullmatch(command):
            return "import"
        return "curl" if _is_curl(command) else None


def read_examples(doc: str, source: str) -> tuple[list[Example], set[tuple[str, str]]]:
    """A document's examples in order, and the EXCLUDED commands it holds; DocFormatError if one cannot be read."""
    examples: list[Example] = []
    excluded: set[tuple[str, str]] = set()
    for first, language, lines in _blocks(doc, source.splitlines()):
        if language != "bash":
            if any(re.search(r"\bcurl\b", line) for line in lines):
                raise DocFormatError(f"{doc}:{first}: curl examples go in a ```bash block, not ```{language}")
            continue
        commands, comments = _commands(doc, first, lines)
        runnable = [c for c in commands if c.kind() is not None]
        for c in commands:
            if c.kind() is not None:
                continue
            if TALKS_TO_SERVICE.search(c.command):
                known = [k for k in EXCLUDED if k[0] == doc and c.command.strip().startswith(k[1])]
                if not known:
                    raise DocFormatError(
                        f"{doc}:{c.line}: {c.command.strip()[:60]!r} talks to the service without curl: run it "
                        "here or list it in EXCLUDED with the reason it cannot run"
                    )
                excluded.update(known)
            elif runnable:
                raise DocFormatError(
                    f"{doc}:{c.line}: {c.command.strip()[:60]!r}: a block of examples holds only curl examples, "
                    "imports, keys (`NAME=$(ridgeline keys create --name N --scope S | tail -n 1)`) and comments"
                )
        if not runnable:
            continue
        for line, comment in comments:
            if JSON_MEMBER.search(comment):
                raise DocFormatError(
                    f"{doc}:{line}: a comment holding a JSON member that is not an answer (an answer goes on the "
                    f"comment lines right below its command, starting `# {{` or `# STATUS`): #{comment}"
                )
        for c in runnable:
            try:
                if c.kind() == "curl":
                    c.stages = _pipeline(c.command)
                else:
                    command = c.command.strip()
                    key = KEY.fullmatch(command)
                    c.key = key["var"] if key else None
                    c.cli = _words(key["args"] if key else command.split(" ", 1)[1])[0]
                    if c.answered:
                        raise DocFormatError("a command line's output is no answer to show")
            except DocFormatError as err:
                raise DocFormatError(f"{doc}:{c.line}: {err}") from err
            examples.append(c)
    return examples, excluded


def _blocks(doc: str, lines: list[str]) -> list[tuple[int, str, list[str]]]:
    """Fenced blocks (the line number of their first line, language, lines); a curl in prose is an error."""
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"\s*```(\S*)", lines[i])
        if fence is None:
            if CURL_IN_PROSE.search(lines[i]):
                raise DocFormatError(f"{doc}:{i + 1}: a curl example in prose: give it a ```bash block")
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```")), None)
        if end is None:
            raise DocFormatError(f"{doc}:{i + 1}: a fenced block that never closes")
        blocks.append((i + 2, fence.group(1), lines[i + 1 : end]))
        i = end + 1
    return blocks


def _scan(line: str, quote: str | None) -> tuple[str, str | None, str | None]:
    """One line of shell: its code, the quote still open at its end, and its comment (a `#` outside quotes)."""
    for i, ch in enumerate(line):
        if quote is not None:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i], None, line[i + 1 :]
    return line, quote, None


def _commands(doc: str, first: int, lines: list[str]) -> tuple[list[Example], list[tuple[int, str]]]:
    """A block's commands, each with the answer right below it, and its other comments (line, text)."""
    commands: list[Example] = []
    comments: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            if stripped:
                comments.append((first + i, stripped[1:]))
            i += 1
            continue
        start, code, quote = first + i, [], None
        while True:
            part, quote, comment = _scan(lines[i], quote)
            if comment is not None:
                comments.append((first + i, comment))
            code.append(part.rstrip())
            i += 1
            if quote is None and not code[-1].endswith(("\\", "|")):
                break
            if i == len(lines):
                raise DocFormatError(f"{doc}:{start}: a command that never ends (a quote left open?)")
        example = Example(doc, start, "\n".join(p.removesuffix("\\") for p in code))
        i = _answer(doc, first, lines, i, example)
        commands.append(example)
    return commands, comments


def _answer(doc: str, first: int, lines: list[str], i: int, example: Example) -> int:
    """Reads the answer shown right below a command (from lines[i]) into it; returns the line after it."""
    head = re.fullmatch(r"#\s?(?:(\d{3})\b\s*)?(.*)", lines[i].strip()) if i < len(lines) else None
    if head is None or (head.group(1) is None and not head.group(2).startswith(("{", "["))):
        return i  # no answer, or a prose comment
    example.answered = True
    example.status = int(head.group(1)) if head.group(1) else None
    text, end = head.group(2), i + 1
    if not text:
        return end
    while _depth(text) > 0:
        if end == len(lines) or not lines[end].strip().startswith("#"):
            raise DocFormatError(f"{doc}:{first + i}: an answer whose brackets never close")
        text += "\n" + lines[end].strip()[1:]
        end += 1
    try:
        example.answer = parse_answer(text)
    except DocFormatError as err:
        raise DocFormatError(f"{doc}:{first + i}: {err}") from err
    return end


def _depth(text: str) -> int:
    """Brackets open at the end of `text`, outside strings."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            in_string = escaped or ch != '"'
            escaped = not escaped and ch == "\\"
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return depth


def _words(command: str) -> list[list[str]]:
    try:
        words = shlex.split(command)
    except ValueError as err:
        raise DocFormatError(f"cannot split {command[:60]!r}: {err}") from err
    stages: list[list[str]] = [[]]
    for word in words:
        stages.append([]) if word == "|" else stages[-1].append(word)
    return stages


def _is_curl(command: str) -> bool:
    return any(stage[:1] == ["curl"] for stage in _words(command))


def _pipeline(command: str) -> list[Curl | str]:
    stages: list[Curl | str] = []
    for words in _words(command):
        if words[:1] == ["curl"]:
            stages.append(_curl(words[1:]))
        elif words[:2] == ["python3", "-c"] and len(words) == 3:
            stages.append(words[2])
        elif words == ["head"]:
            stages.append("head")
        else:
            raise DocFormatError(f"a pipeline stage the runner does not know: {' '.join(words)[:60]!r}")
    return stages


def _curl(words: list[str]) -> Curl:
    method, path, headers, data, binary, output = None, None, {}, None, False, None
    it = iter(words)
    for word in it:
        if word == "-s":
            continue
        if word in ("-X", "-H", "-d", "--data-binary", "-o"):
            value = next(it, None)
            if value is None:
                raise DocFormatError(f"curl {word} without its value")
            if word == "-X":
                method = value
            elif word == "-H":
                name, _, header = value.partition(":")
                headers[name.strip().lower()] = header.strip()
            elif word == "-o":
                output = value
            else:
                data, binary = value, word == "--data-binary"
        elif word.startswith(SERVER + "/"):
            path = word.removeprefix(SERVER)
        else:
            raise DocFormatError(
                f"curl {word[:40]!r}: not an option the runner knows (-s, -o, -X, -H, -d, --data-binary) nor {SERVER}/…"
            )
    if path is None:
        raise DocFormatError(f"curl without a {SERVER}/… URL")
    if data is not None:
        headers.setdefault("content-type", "application/x-www-form-urlencoded")  # what curl sends with -d
    return Curl(method or ("POST" if data is not None else "GET"), path, headers, data, binary, output)


# ---------------------------------------------------------------------------------------------------------- running


PLANNED: dict[str, httpx.Response] = {}


@dataclass
class Session:
    client: TestClient
    folder: Path
    variables: dict[str, str] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)  # the ids answered so far, latest last


def run(example: Example, session: Session) -> list[str]:
    """Runs one example; what differs from the answer it shows, each line prefixed with where it is."""
    where = f"{example.doc}:{example.line}"
    if example.cli is not None:
        return [f"{where}: {problem}" for problem in _command_line(example, session)]
    stdout, response, problems = "", None, []
    for stage in example.stages:
        if stage == "head":
            stdout = "".join(stdout.splitlines(keepends=True)[:10])
        elif isinstance(stage, str):
            stdout = _python(stage, stdout)
        else:
            try:
                response = _send(stage, stdout, session)
            except DocFormatError as err:
                return [f"{where}: {err}"]
            stdout = "" if stage.output else response.text
            if response.headers.get("content-type", "").startswith("application/json"):
                body = response.json()
                if isinstance(body, dict) and isinstance(body.get("id"), str | int):
                    session.ids.append(str(body["id"]))
            if stage is not example.stages[-1] and not response.is_success:
                problems.append(f"{where}: {stage.method} {stage.path}: {response.status_code} {response.text[:300]}")
    assert response is not None
    said = f"{response.status_code} answered: {response.text[:300]}"
    if example.status is not None and response.status_code != example.status:
        problems.append(f"{where}: status {example.status} shown, {said}")
    elif example.status is None and not response.is_success:
        problems.append(f"{where}: no status shown (a 2xx), {said}")
    elif example.answer is not None:
        try:
            body = response.json()
        except ValueError:
            return [*problems, f"{where}: an answer shown, {response.headers.get('content-type')} answered"]
        problems += [f"{where}: {p}" for p in compare(example.answer, body)]
    return problems


def _send(curl: Curl, stdin: str, session: Session) -> Any:
    headers = {name: _variables(value, session) for name, value in curl.headers.items()}
    body: str | None = curl.data
    if body is not None and body.startswith("@"):
        name = body[1:]
        if name == "-":
            body = stdin
        elif name in FILES:
            body = FILES[name]
        else:
            raise DocFormatError(f"no file {name!r} for the example to send: add it to FILES")
        if not curl.binary:
            body = body.replace("\r", "").replace("\n", "")
    if body is not None:
        body = re.sub(r'"([^"\n]*…[^"\n]*)"', lambda m: json.dumps(_placeholder(m.group(1), session)), body)
    path = re.sub(r"[\w.-]*…[\w.-]*", lambda m: _placeholder(m.group(), session), _variables(curl.path, session))
    if (curl.method, path.partition("?")[0]) == ("POST", "/v1/plan") and body is not None:
        # A plan stores nothing and reads only the catalogue (with the physical model: no calibration), so the same
        # body answers the same in every document: README.md and docs/api.md show one search, planned once (~8 s).
        key = json.dumps(json.loads(body), sort_keys=True)
        if key not in PLANNED:
            PLANNED[key] = session.client.request(curl.method, path, content=body, headers=headers)
        return PLANNED[key]
    response = session.client.request(curl.method, path, content=body, headers=headers)
    if curl.output:
        (session.folder / Path(curl.output).name).write_bytes(response.content)
    return response


def _command_line(example: Example, session: Session) -> list[str]:
    """`ridgeline keys create` on the test's database, or `ridgeline benchmarks import` over the test's client (on a
    slice of its table), run by the command line itself in this process."""
    assert example.cli is not None
    try:
        argv = [_variables(word, session) for word in example.cli]
    except DocFormatError as err:
        return [str(err)]
    if argv[:2] == ["keys", "create"]:
        argv += ["--database-url", session.client.app.state.settings.database_url]  # type: ignore[attr-defined]
    else:
        try:
            named = cli.build_parser().parse_args(argv).file
        except SystemExit:
            return [f"ridgeline {' '.join(argv)[:80]}: not what the command line takes"]
        table = REPO / named
        if not table.exists():
            table = table.with_name(table.name + ".gz")  # stored compressed: the command reads either
        if not table.exists():
            return [f"no table {named} in the repository"]
        with gzip.open(table, "rt") if table.suffix == ".gz" else table.open() as f:
            rows = f.readlines()
        part = session.folder / Path(named).name
        part.write_text(rows[0] + "".join(rows[1::IMPORT_EVERY]))
        argv[argv.index(named)] = str(part)
    out, said = io.StringIO(), io.StringIO()
    local = session.client._transport  # the test client's way into the app (httpx has no public name for it)

    class Local(httpx.Client):
        def __init__(self, *args: Any, transport: httpx.BaseTransport | None = None, **kwargs: Any) -> None:
            super().__init__(*args, transport=transport or local, **kwargs)

    with mock.patch.object(httpx, "Client", Local), contextlib.redirect_stdout(out), contextlib.redirect_stderr(said):
        try:
            code = cli.main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
    if code != 0:
        return [f"ridgeline {' '.join(example.cli)[:60]}: exit {code}: {said.getvalue()[-300:]}"]
    if example.key is not None:
        session.variables[example.key] = out.getvalue().strip().splitlines()[-1]
    return []


def _variables(text: str, session: Session) -> str:
    def value(match: re.Match[str]) -> str:
        if match.group(1) not in session.variables:
            raise DocFormatError(f"${match.group(1)}: no key of that name made above")
        return session.variables[match.group(1)]

    return re.sub(r"\$\{?(\w+)\}?", value, text)


def _placeholder(shown: str, session: Session) -> str:
    regex = ".*".join(map(re.escape, shown.split(ELLIPSIS)))
    found = next((i for i in reversed(session.ids) if re.fullmatch(regex, i)), None)
    if found is None:
        raise DocFormatError(f"{shown!r} stands for no id answered above")
    return found


def _python(code: str, stdin: str) -> str:
    """`python3 -c CODE` with `stdin`, in this process."""
    out, old = io.StringIO(), sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            exec(code, {"__name__": "__main__"})
    finally:
        sys.stdin = old
    return out.getvalue()


def clean_slate(client: TestClient) -> None:
    """Nothing stored but the built-in catalogue, and ids that count from 1, as on a new server."""
    factory = client.app.state.sessionmaker  # type: ignore[attr-defined]
    with factory() as db:
        for table in reversed(Base.metadata.sorted_tables):
            if table.name in (HardwareProfile.__tablename__, ModelConfig.__tablename__):
                db.execute(delete(table).where(table.c.builtin.is_(False)))  # their versions go with them
            elif table.name in (HardwareProfileVersion.__tablename__, ModelConfigVersion.__tablename__):
                continue  # the built-ins' are kept
            else:
                db.execute(delete(table))
        if db.get_bind().dialect.name == "postgresql":  # SQLite reuses ids of an empty table by itself
            for table in Base.metadata.sorted_tables:
                for column in table.primary_key.columns:
                    if isinstance(column.type, Integer):
                        sequence = func.pg_get_serial_sequence(table.name, column.name)
                        db.execute(select(func.setval(sequence, 1, False)))
        db.commit()


# ---------------------------------------------------------------------------------------------------------- tests


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


WITH_EXAMPLES = [path for path in DOCS if re.search(r"\bcurl\b", path.read_text())]


def test_every_example_is_read_and_every_exclusion_is_still_there() -> None:
    found, excluded = {}, set()
    for path in DOCS:
        examples, skipped = read_examples(_name(path), path.read_text())
        found[_name(path)] = len(examples)
        excluded |= skipped
    assert found["README.md"] >= 10 and found["docs/api.md"] >= 20, found
    assert excluded == set(EXCLUDED), "an EXCLUDED command no document holds any more"
    assert [_name(p) for p in WITH_EXAMPLES] == [doc for doc, n in found.items() if n], found


@pytest.fixture
def settings(database_url: str) -> Settings:
    """The examples answer in full: on a loaded test machine the planner's example must not meet the request's time
    limit, whose partial answer (the candidates finished in time) would differ from the doc's. Jobs are stored, not
    run: an example shows a job as submitted (test_jobs_ray.py runs them on Ray)."""
    return Settings(database_url=database_url, request_timeout_s=600, heavy_requests_per_window=0, run_jobs=False)


@pytest.mark.parametrize("path", WITH_EXAMPLES, ids=_name)
def test_every_example_answers_as_its_doc_shows(client: TestClient, path: Path, tmp_path: Path) -> None:
    examples, _ = read_examples(_name(path), path.read_text())
    clean_slate(client)
    session = Session(client, tmp_path)
    problems = [problem for example in examples for problem in run(example, session)]
    clean_slate(client)
    assert problems == [], "\n" + "\n".join(problems)


def test_figures_are_compared_to_the_digits_shown() -> None:
    assert figure_matches("3.90", 3.8951) and figure_matches("3.90", 3.9049)
    assert not figure_matches("3.90", 3.8949) and not figure_matches("3.90", 3.906)
    assert figure_matches("1.83e-4", 1.8349e-4) and not figure_matches("1.83e-4", 1.8351e-4)
    assert figure_matches("5e-06", 5.4e-6) and not figure_matches("5e-06", 5.6e-6)
    assert figure_matches("872", 872.25) and not figure_matches("872", 872.5001)
    assert figure_matches("14", 14) and not figure_matches("14", 15) and not figure_matches("1", True)
    assert figure_matches("0.040", 0.0396) and not figure_matches("0.040", 0.0406)
    assert not figure_matches("3.90", None) and not figure_matches("3.90", "3.90")


def test_an_answer_elides_only_where_it_says() -> None:
    answer = parse_answer('{"id":"tr_…","rate":1.5,"stats":{…},"items":[{"n":2,…},…],…}')
    answered = {"id": "tr_5f3", "rate": 1.46, "stats": {"p50": 1}, "items": [{"n": 2, "m": 3}], "x": 0}
    assert compare(answer, answered) == []
    assert compare(answer, {"id": "5f3", "rate": 1.56, "stats": [], "items": [], "x": 0}) == [
        "id: shown 'tr_…', answered '5f3'",
        "rate: shown 1.5, answered 1.56",
        "stats: an object shown, [] answered",
        "items: 1 items shown, 0 answered",
    ]
    exact = parse_answer('{"status":"ok","counts":[1,2],"on":true,"off":null}')
    assert compare(exact, {"status": "ok", "counts": [1, 2], "on": True, "off": None}) == []
    assert compare(exact, {"status": "ok", "counts": [1, 2, 3], "on": 1, "new": 0}) == [
        "counts: 2 items shown, 3 answered",
        "on: shown true, answered 1",
        "off: shown, not answered",
        "the answer: also answers ['new']: show them, or elide with …",
    ]


@pytest.mark.parametrize(
    ("block", "error"),
    [
        ("curl --compressed http://127.0.0.1:8000/healthz", "not an option the runner knows"),
        ("curl -s http://localhost:8000/healthz", "not an option the runner knows"),
        ("curl -s http://127.0.0.1:8000/healthz | jq .status", "a pipeline stage the runner does not know"),
        ('curl -s http://127.0.0.1:8000/healthz\n# {"status":"ok"} and more', "text after the answer"),
        ('curl -s http://127.0.0.1:8000/healthz\n# {"status":"ok",\n', "brackets never close"),
        ('curl -s http://127.0.0.1:8000/healthz   # {"status":"ok"}', "a comment holding a JSON member"),
        ('# the answer: {"status": "ok"}\ncurl -s http://127.0.0.1:8000/healthz', "a comment holding a JSON member"),
        ("curl -s http://127.0.0.1:8000/healthz\nridgeline keys list", "a block of examples holds only"),
        ("ridgeline-worker flush --server http://ridgeline:8000", "talks to the service without curl"),
        ('curl -s -d \'{"a": 1} http://127.0.0.1:8000/v1/plan', "never ends"),
    ],
)
def test_an_example_the_runner_cannot_read_fails(block: str, error: str) -> None:
    with pytest.raises(DocFormatError, match=re.escape(error)):
        read_examples("new.md", f"Text.\n\n```bash\n{block}\n```\n")


@pytest.mark.parametrize(
    "source",
    [
        "See `curl -s http://127.0.0.1:8000/healthz` for the health.\n",
        "```sh\ncurl -s http://127.0.0.1:8000/healthz\n```\n",
        "```\ncurl -s http://127.0.0.1:8000/healthz\n```\n",
    ],
)
def test_a_curl_outside_a_bash_block_fails(source: str) -> None:
    with pytest.raises(DocFormatError, match="curl"):
        read_examples("new.md", source)


def test_a_doc_whose_figure_differs_fails(client: TestClient, tmp_path: Path) -> None:
    """README.md's first example that shows a figure, doctored by one in its last digit: exactly that figure fails."""
    source = (REPO / "README.md").read_text()
    examples, _ = read_examples("README.md", source)
    example, key, shown = next(
        (e, k, v.text)
        for e in examples
        if isinstance(e.answer, Obj)
        for k, v in e.answer.members.items()
        if isinstance(v, Figure)
    )
    session = Session(client, tmp_path)
    assert run(example, session) == []
    digits = re.fullmatch(r"(.*?)(\d)((?:[eE][-+]?\d+)?)", shown)
    assert digits is not None
    doctored = f"{digits[1]}{(int(digits[2]) + 1) % 10}{digits[3]}"
    lines = source.splitlines(keepends=True)
    at = next(i for i in range(example.line - 1, len(lines)) if f'"{key}":{shown}' in lines[i])
    lines[at] = lines[at].replace(f'"{key}":{shown}', f'"{key}":{doctored}', 1)
    (changed,) = [e for e in read_examples("README.md", "".join(lines))[0] if e.line == example.line]
    (problem,) = run(changed, session)
    assert problem.startswith(f"README.md:{example.line}: {key}: shown {doctored}, answered ")


def test_every_operation_is_in_the_api_docs_table_of_groups(settings: Settings) -> None:
    """docs/api.md's table of groups names every path of the OpenAPI document (a path it names covers the paths below
    it: `/v1/hardware` covers `/v1/hardware/{slug}`; `.svg` / `.png` are one chart)."""
    table = (REPO / "docs" / "api.md").read_text().split("| Group |", 1)[1].split("\n\n", 1)[0]

    def norm(path: str) -> str:
        return re.sub(r"\.(svg|png)$", "", re.sub(r"\{[^}]*\}", "{}", path))

    named = [norm(p) for p in re.findall(r"(/(?:v1/|healthz|metrics)[\w/{}.-]*)", table)]
    app = create_app(settings)
    paths = app.openapi()["paths"]
    app.state.engine.dispose()
    assert [p for p in paths if not any(norm(p) == n or norm(p).startswith(n + "/") for n in named)] == []
