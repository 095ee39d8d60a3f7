"""Structured outputs (src/grammar) against an independent JSON Schema implementation.

- The hand-made instances of tests/grammar/schemas are checked with Python's `jsonschema`, so the test data
  itself is right: `valid` and `strict_invalid` (valid JSON Schema instances the engine refuses by design:
  extra properties, keys out of declared order, formats jsonschema does not check) validate, `invalid` do
  not. `gridq grammar check` must accept the valid ones and reject the others.
- A mask-driven random walk (`gridq grammar sample`, the bundled tokenizer) must always produce JSON that
  `jsonschema` validates, with its format checker on.
"""
import json
import os
import subprocess
from pathlib import Path

import jsonschema
import pytest
from jsonschema.validators import validator_for

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = sorted((REPO / "tests" / "grammar" / "schemas").glob("*.json"))
UNSUPPORTED = sorted((REPO / "tests" / "grammar" / "unsupported").glob("*.json"))
TOKENIZER = REPO / "models" / "laguna-tiny-code"


def gridq_bin():
    b = os.environ.get("GRIDQ_BIN")
    if not b or not Path(b).exists():
        pytest.skip("GRIDQ_BIN not set")
    return b


def validator(schema):
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def load(p):
    return json.loads(p.read_text(encoding="utf-8"))


def compact(v):
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def test_enough_schemas():
    assert len(SCHEMAS) >= 100


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_instances_agree_with_jsonschema(path):
    case = load(path)
    v = validator(case["schema"])
    for x in case["valid"] + case.get("strict_invalid", []):
        assert v.is_valid(x), f"{path.name}: {x!r} should be valid: {list(v.iter_errors(x))[:1]}"
    for x in case["invalid"]:
        assert not v.is_valid(x), f"{path.name}: {x!r} should be invalid"


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_check_cli(path, tmp_path):
    case = load(path)
    text = tmp_path / "instance.json"
    for key, want in (("valid", 0), ("invalid", 1), ("strict_invalid", 1)):
        for x in case.get(key, []):
            text.write_text(compact(x), encoding="utf-8")
            r = subprocess.run([gridq_bin(), "grammar", "check", str(path), "--text", str(text)],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == want, f"{key} {compact(x)}: {r.stdout}{r.stderr}"
            assert ("accept" if want == 0 else "reject at byte") in r.stdout


@pytest.mark.parametrize("path", SCHEMAS, ids=[p.stem for p in SCHEMAS])
def test_sampled_outputs_validate(path):
    case = load(path)
    v = validator(case["schema"])
    seed = sum(path.stem.encode()) % 1000
    r = subprocess.run([gridq_bin(), "grammar", "sample", str(path), "--tokenizer", str(TOKENIZER),
                        "--seed", str(seed), "--count", "4", "--jsonl"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.rstrip("\n").split("\n")  # not splitlines(): texts may hold U+2028
    assert len(lines) == 4
    for line in lines:
        text = json.loads(line)["text"]
        value = json.loads(text)
        errors = list(v.iter_errors(value))
        assert not errors, f"{path.name}: sampled {text!r} is invalid: {errors[0].message}"


@pytest.mark.parametrize("path", UNSUPPORTED, ids=[p.stem for p in UNSUPPORTED])
def test_unsupported_is_a_compile_error(path):
    case = load(path)
    r = subprocess.run([gridq_bin(), "grammar", "compile", str(path)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert case["error"] in r.stderr


def test_sample_json_object_regex_choice(tmp_path):
    r = subprocess.run([gridq_bin(), "grammar", "sample", "--json-object", "--tokenizer", str(TOKENIZER),
                        "--count", "5", "--jsonl", "--seed", "3"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.rstrip("\n").split("\n"):
        assert isinstance(json.loads(json.loads(line)["text"]), dict)
    r = subprocess.run([gridq_bin(), "grammar", "sample", "--choice", "-e", '["left","right","up"]',
                        "--tokenizer", str(TOKENIZER), "--count", "5", "--jsonl"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert all(json.loads(l)["text"] in ("left", "right", "up") for l in r.stdout.rstrip("\n").split("\n"))
    import re
    r = subprocess.run([gridq_bin(), "grammar", "sample", "--regex", "-e", "[a-z]{3}-[0-9]{2,4}",
                        "--tokenizer", str(TOKENIZER), "--count", "5", "--jsonl"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert all(re.fullmatch(r"[a-z]{3}-[0-9]{2,4}", json.loads(l)["text"]) for l in r.stdout.rstrip("\n").split("\n"))


def test_check_token_by_token_and_reject_offset(tmp_path):
    schema = REPO / "tests" / "grammar" / "schemas" / "object_required.json"
    text = tmp_path / "t.json"
    text.write_text('{"name":"Al","age":3}')
    r = subprocess.run([gridq_bin(), "grammar", "check", str(schema), "--text", str(text), "--tokenizer",
                        str(TOKENIZER)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("accept"), r.stdout + r.stderr
    text.write_text('{"name":"Al","age":"3"}')
    r = subprocess.run([gridq_bin(), "grammar", "check", str(schema), "--text", str(text)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "reject at byte 19" in r.stdout, r.stdout
