"""The real load-testing tools, installed from the package registry into `.venv-loadtools` (scripts/setup.sh
loadtools: their dependencies pin versions the service's own do not allow), run as subprocesses against an
endpoint. A word-level tokenizer (`word_tokenizer`) makes the tools count tokens as the emulated engine does."""

from __future__ import annotations

import subprocess
from pathlib import Path

from worker.servingbench import Load, run_tool

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-loadtools"
NEEDS = "the load-testing tools are missing: run scripts/setup.sh loadtools (aiperf and GuideLLM in .venv-loadtools)"


def tool(name: str) -> str:
    path = VENV / "bin" / name
    if not path.exists():
        raise AssertionError(NEEDS)
    return str(path)


def word_tokenizer(directory: Path) -> Path:
    """A Hugging Face tokenizer whose tokens are whitespace-separated words (a WordLevel model), saved in
    `directory`: what the tools load with `--tokenizer` to make and count prompts of N words."""
    script = f"""
import json
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
vocab = {{"[UNK]": 0, "tok": 1}}
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
tok.save({str(directory / "tokenizer.json")!r})
# [UNK] is not declared special: the tools decode prompts with skip_special_tokens and would drop every word.
json.dump({{"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1000000}},
          open({str(directory / "tokenizer_config.json")!r}, "w"))
"""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool("python"), "-c", script], check=True, timeout=120)
    return directory


def run_aiperf(url: str, model: str, tokenizer: Path, out: Path, *, concurrency: int, requests: int, prompt: int,
               output: int) -> Path:  # fmt: skip
    """`aiperf profile` as `ridgeline-worker serving-bench --tool aiperf` runs it; its profile export."""
    load = Load(concurrency, requests, prompt, output)
    return run_tool("aiperf", url, model, str(tokenizer), out, load, tools_dir=VENV / "bin", timeout_s=600)


def run_guidellm(url: str, model: str, tokenizer: Path, out: Path, *, concurrency: int, requests: int, prompt: int,
                 output: int) -> Path:  # fmt: skip
    """`guidellm run` as `ridgeline-worker serving-bench --tool guidellm` runs it; its JSON report."""
    load = Load(concurrency, requests, prompt, output)
    return run_tool("guidellm", url, model, str(tokenizer), out, load, tools_dir=VENV / "bin", timeout_s=600)
