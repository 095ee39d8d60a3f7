"""Tokenizer parity: `gridq tokenize` against the Python `tokenizers` package (HF's reference implementation).

Invalid UTF-8 input: gridq replaces it with U+FFFD by the maximal-subpart rule before tokenizing, which is what
Python's bytes.decode('utf-8', errors='replace') does, so the reference is
hf.encode(raw_bytes.decode('utf-8', errors='replace')).
Run: GRIDQ_BIN=build/gridq .venv/bin/python -m pytest tests/python/test_tokenizer_parity.py
"""
import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "laguna-tiny-code"
TOKENIZER_JSON = MODEL / "tokenizer.json"
GRIDQ = os.environ.get("GRIDQ_BIN", str(ROOT / "build" / "gridq"))

# Laguna-S-2.1's pre-tokenizer shape (laguna.md §5): cl100k-like Split, one digit per pre-token, then
# ByteLevel without its own regex.
CL100K_DIGIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def gridq_ids(tok_path, data: bytes, tmp_path, extra=()):
    f = tmp_path / "input.bin"
    f.write_bytes(data)
    r = subprocess.run([GRIDQ, "tokenize", str(tok_path), "--text-file", str(f), "--json", *extra],
                       capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def gridq_roundtrip(tok_path, data: bytes, tmp_path):
    f = tmp_path / "input.bin"
    f.write_bytes(data)
    r = subprocess.run([GRIDQ, "tokenize", str(tok_path), "--text-file", str(f), "--decode"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


TORTURE = {
    "ascii": "def f(x):\n    return x*2  # done\n",
    "emoji": "I \u2764\ufe0f tokens \U0001F600\U0001F680!",
    "zwj": "family: \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 flag: \U0001F3F3\ufe0f\u200d\U0001F308",
    "cjk": "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff0c\u65e5\u672c\u8a9e\u306e\u30c6\u30b9\u30c8\u3002\ud55c\uad6d\uc5b4",
    "combining": "e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 \u1e9b\u0323",
    "rtl": "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627 \u202eabc\u202c",
    "control": "a\x00b\x01c\x1f\x7f\u0085d\te\rf\x0bg\x0ch",
    "think_typed": "user typed </think> and <think> and <|endoftext|> and </tool_call>x<assistant>",
    "digits": "1234567890" * 20 + " 3.14159 \u0661\u0662\u0663 \u00bd \u2460",
    "whitespace": "a" + " " * 50 + "b\n\n\n\t\t  \n" + "\u3000\u00a0\u2003 x \u180e y \u200b z  ",
    "long_word": "x" * 5000 + " " + "\u00e9" * 3000,
    "apostrophes": "I'm you're they'LL it's DON'T 's 't",
    "mixed": "naïve café — “quotes” «guillemets» … ½ ² ∑ ∞ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "empty": "",
    "only_space": "   ",
    "lone_newlines": "\n\n\r\n\r",
}

INVALID = {
    "lone_continuation": b"abc\x80def",
    "truncated_4byte": b"x\xf0\x9f\x98",
    "truncated_mid": b"x\xf0\x9f\x98y",
    "overlong": b"\xc0\xaf\xe0\x80\xaf",
    "surrogate": b"\xed\xa0\x80z",
    "ff_fe": b"\xff\xfe\xfd",
    "above_max": b"\xf4\x90\x80\x80!",
    "mixed": "ok \u00e9 ".encode() + b"\xe2\x82" + " \U0001F600".encode() + b"\xc3",
}


@pytest.fixture(scope="module")
def hf():
    return Tokenizer.from_file(str(TOKENIZER_JSON))


def test_code_eval_whole_file(hf, tmp_path):
    data = (ROOT / "data" / "code-eval.txt").read_bytes()
    ref = hf.encode(data.decode("utf-8", errors="replace"), add_special_tokens=False).ids
    ours = gridq_ids(TOKENIZER_JSON, data, tmp_path)
    assert len(ours) == len(ref)
    assert ours == ref


@pytest.mark.parametrize("name", sorted(TORTURE))
def test_unicode_torture(hf, tmp_path, name):
    text = TORTURE[name]
    ref = hf.encode(text, add_special_tokens=False).ids
    assert gridq_ids(TOKENIZER_JSON, text.encode(), tmp_path) == ref
    # decode(encode(x)) == x for valid UTF-8, and equals HF's decode
    assert gridq_roundtrip(TOKENIZER_JSON, text.encode(), tmp_path).decode("utf-8") == text
    assert hf.decode(ref, skip_special_tokens=False) == text


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_utf8_matches_python_replace(hf, tmp_path, name):
    raw = INVALID[name]
    ref = hf.encode(raw.decode("utf-8", errors="replace"), add_special_tokens=False).ids
    assert gridq_ids(TOKENIZER_JSON, raw, tmp_path) == ref


def test_add_special_tokens_and_no_added_tokens(hf, tmp_path):
    text = "<|endoftext|>def f(): </think> pass<tool_call>"
    assert gridq_ids(TOKENIZER_JSON, text.encode(), tmp_path, ["--add-special-tokens"]) == \
        hf.encode(text, add_special_tokens=True).ids
    # All eight added tokens of this model are special, so HF's encode_special_tokens is the same switch.
    hf2 = Tokenizer.from_file(str(TOKENIZER_JSON))
    hf2.encode_special_tokens = True
    assert gridq_ids(TOKENIZER_JSON, text.encode(), tmp_path, ["--no-added-tokens"]) == \
        hf2.encode(text, add_special_tokens=False).ids


def _variant(tmp_path, name, pre_tokenizer, post_processor=None, added_extra=(), merges_as_strings=False):
    j = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    j["pre_tokenizer"] = pre_tokenizer
    if post_processor is not None:
        j["post_processor"] = post_processor
    next_id = len(j["model"]["vocab"])
    for content, flags in added_extra:
        entry = {"id": next_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                 "normalized": False, "special": False}
        entry.update(flags)
        j["added_tokens"].append(entry)
        next_id += 1
    if merges_as_strings:
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return p


S21_PRE = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": CL100K_DIGIT}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
BOS_POST = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}}
ADDED = [("<user>", {}), ("<arg_key>", {"normalized": True}), ("  <pad2>", {"lstrip": True, "rstrip": True}),
         ("<rs>", {"rstrip": True, "special": True}), ("<ls>", {"lstrip": True, "special": True})]

VARIANTS = {
    "s21_like": dict(pre_tokenizer=S21_PRE, post_processor=BOS_POST, added_extra=ADDED, merges_as_strings=True),
    "bytelevel_prefix_space": dict(pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}),
    "split_merged_prev": dict(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
    "split_merged_next": dict(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
    "split_removed_contig_invert": dict(pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"[,;]"}, "behavior": "Removed", "invert": False},
        {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Contiguous", "invert": True},
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}),
}

VARIANT_TEXTS = [
    "def add(a, b):\n    return a + b  # 12345 apples, 67;89\n",
    "<user>hi</user>\n<arg_key>k</arg_key>  <pad2>  x <rs>   y   <ls>z",
    "I'M here; we'LL see 2024-11-30 \u00e9\u00e8 \U0001F600 \u4e2d\u6587 \u0661\u0662",
    TORTURE["whitespace"], TORTURE["control"], TORTURE["think_typed"],
]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pre_tokenizer_and_post_processor_variants(tmp_path, variant):
    path = _variant(tmp_path, variant, **VARIANTS[variant])
    ref_tok = Tokenizer.from_file(str(path))
    for i, text in enumerate(VARIANT_TEXTS):
        for special in (False, True):
            ref = ref_tok.encode(text, add_special_tokens=special).ids
            extra = ["--add-special-tokens"] if special else []
            assert gridq_ids(path, text.encode(), tmp_path, extra) == ref, (variant, i, special)


def test_unsupported_normalizer_is_refused(tmp_path):
    j = json.loads(TOKENIZER_JSON.read_text(encoding="utf-8"))
    j["normalizer"] = {"type": "NFKC"}
    p = tmp_path / "nfkc.json"
    p.write_text(json.dumps(j))
    r = subprocess.run([GRIDQ, "tokenize", str(p), "--text", "x"], capture_output=True)
    assert r.returncode != 0
    assert b"normalizer 'NFKC' is not supported" in r.stderr
