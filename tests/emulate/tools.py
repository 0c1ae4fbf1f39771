"""The real load-testing tools, installed from the package registry into `.venv-loadtools` (scripts/setup.sh
loadtools: their dependencies pin versions the service's own do not allow), run as subprocesses against an
endpoint. A word-level tokenizer (`word_tokenizer`) makes the tools count tokens as the emulated engine does."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

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
    subprocess.run([str(VENV / "bin" / "python"), "-c", script], check=True, timeout=120)
    return directory


def run_aiperf(url: str, model: str, tokenizer: Path, out: Path, *, concurrency: int, requests: int, prompt: int,
               output: int, timeout_s: float = 300) -> Path:  # fmt: skip
    """`aiperf profile` at a concurrency, fixed lengths, streamed completions; its profile export."""
    args = [tool("aiperf"), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
            "--streaming", "--tokenizer", str(tokenizer), "--concurrency", str(concurrency),
            "--request-count", str(requests), "--warmup-request-count", str(concurrency),
            "--synthetic-input-tokens-mean", str(prompt), "--synthetic-input-tokens-stddev", "0",
            "--output-tokens-mean", str(output), "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
            "--artifact-dir", str(out), "--ui-type", "none"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=out.parent)
    result = out / "profile_export_aiperf.json"
    assert done.returncode == 0 and result.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return result


def run_guidellm(url: str, model: str, tokenizer: Path, out: Path, *, concurrency: int, requests: int, prompt: int,
                 output: int, timeout_s: float = 300) -> Path:  # fmt: skip
    """`guidellm run` with the concurrent profile, synthetic text of fixed lengths; its JSON report."""
    out.mkdir(parents=True, exist_ok=True)
    result = out / "benchmarks.json"
    args = [tool("guidellm"), "run", "--backend", f"kind=openai_http,target={url},model={model}",
            "--profile", f"kind=concurrent,streams={concurrency}",
            "--constraint", f"kind=max_requests,count={requests}",
            "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
            "--data", f"kind=synthetic_text,prompt_tokens={prompt},output_tokens={output}",
            "--output", f"kind=json,path={result}", "--disable-console-interactive"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, cwd=out)
    assert done.returncode == 0 and result.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    json.loads(result.read_text())  # whole
    return result
