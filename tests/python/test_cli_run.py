"""End-to-end checks of the run commands (generate, logits, eval) on the bundled model.

`gridq logits` is compared with the Hugging Face fixture (laguna.md §1.7 thresholds); `gridq generate`
must stream the prompt's continuation and end with the speed line on stderr; `gridq eval --json` must give
the documented keys.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "laguna-tiny-code"
FIXTURE = REPO / "tests" / "fixtures" / "laguna-tiny-code.hf-logits.safetensors"


def gridq_bin():
    b = os.environ.get("GRIDQ_BIN")
    if not b or not Path(b).exists():
        pytest.skip("GRIDQ_BIN not set")
    return b


def test_logits_match_hf_fixture(tmp_path):
    out = tmp_path / "ours.safetensors"
    subprocess.run([gridq_bin(), "logits", str(MODEL), "--input", str(FIXTURE), "--output", str(out)],
                   check=True, capture_output=True, timeout=300)
    ref = load_file(str(FIXTURE))["logits"].astype(np.float64)
    got = load_file(str(out))["logits"].astype(np.float64)
    assert got.shape == ref.shape
    assert (ref.argmax(-1) == got.argmax(-1)).all()
    assert np.abs(ref - got).max() < 1e-2
    lr = ref - ref.max(-1, keepdims=True)
    lr = lr - np.log(np.exp(lr).sum(-1, keepdims=True))
    lg = got - got.max(-1, keepdims=True)
    lg = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    kl = (np.exp(lr) * (lr - lg)).sum(-1).mean()
    assert kl < 1e-4


def test_generate_streams_and_reports_speed():
    r = subprocess.run([gridq_bin(), "generate", str(MODEL), "--prompt", "def fibonacci(n):", "--max-tokens", "24"],
                       check=True, capture_output=True, text=True, timeout=300)
    assert r.stdout.startswith("def fibonacci(n):")
    assert len(r.stdout) > len("def fibonacci(n):") + 10
    assert "prefill" in r.stderr and "decode" in r.stderr and "tok/s" in r.stderr


def test_generate_same_seed_same_text():
    args = [gridq_bin(), "generate", str(MODEL), "--prompt", "import", "--max-tokens", "20", "--temperature", "0.9",
            "--top-p", "0.95", "--seed", "123"]
    a = subprocess.run(args, check=True, capture_output=True, text=True, timeout=300).stdout
    b = subprocess.run(args, check=True, capture_output=True, text=True, timeout=300).stdout
    assert a == b


def test_eval_json_keys(tmp_path):
    text = (REPO / "data" / "code-eval.txt").read_text(encoding="utf-8")[200000:230000]
    f = tmp_path / "t.txt"
    f.write_text(text, encoding="utf-8")
    r = subprocess.run([gridq_bin(), "eval", str(MODEL), "--text", str(f), "--tokens", "1024", "--window", "512",
                        "--json"], check=True, capture_output=True, text=True, timeout=300)
    j = json.loads(r.stdout)
    assert j["positions"] == 2 * 511
    assert 1.5 < j["ppl"] < 30


def test_help_has_examples():
    for cmd in ["generate", "logits", "eval", "chat"]:
        r = subprocess.run([gridq_bin(), cmd, "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0
        assert "Examples" in r.stdout, cmd
