"""Builds a small gridbook-style artifact from a BF16 Laguna checkpoint for the CLI tests, with the Python
standard library only: attention q/k/v/o become compressed-tensors FP8 W8A8 (random finite E4M3 bytes and
per-row F32 scales; the values do not matter to `gridq inspect`), everything else stays BF16 and is listed in
`ignore` by exact module name. Usage: make_fp8_artifact.py SRC_DIR OUT_DIR [--pins]"""
import hashlib, json, os, random, re, struct, sys


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    src, out, pins = sys.argv[1], sys.argv[2], "--pins" in sys.argv
    rng = random.Random(7)
    os.makedirs(out, exist_ok=True)
    tensors = {}
    for fn in sorted(os.listdir(src)):
        if fn.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(src, fn)))
    attn = re.compile(r"model\.layers\.\d+\.self_attn\.[qkvo]_proj\.weight$")
    out_t, ignore = {}, []
    for name, (dtype, shape, blob) in tensors.items():
        if attn.match(name):
            rows, cols = shape
            w = bytes(b if (b & 0x7F) != 0x7F else 0 for b in rng.randbytes(rows * cols))
            out_t[name] = ("F8_E4M3", shape, w)
            out_t[name[:-len(".weight")] + ".weight_scale"] = ("F32", [rows, 1], struct.pack(f"<{rows}f", *([0.01] * rows)))
            continue
        out_t[name] = (dtype, shape, blob)
        module = name[:-len(".weight")] if name.endswith(".weight") else name
        ignore.append(module)
    write_safetensors(os.path.join(out, "model.safetensors"), out_t)
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["quantization_config"] = {"quant_method": "gridbook", "format": "fp8_attention",
                                  "config_file": "quant_config.json", "codebook_file": "cb_codebooks.pqcb"}
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True}
    qc = {"quant_method": "gridbook", "format": "fp8_attention", "layout_version": 1,
          "config_groups": {"attention_fp8": {
              "format": "float-quantized",
              "targets": [r"re:model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj$"],
              "weights": dict(fp8, strategy="channel", dynamic=False),
              "input_activations": dict(fp8, strategy="token", dynamic=True)}},
          "ignore": sorted(ignore)}
    json.dump(qc, open(os.path.join(out, "quant_config.json"), "w"), indent=2)
    if pins:
        files = {}
        for fn in sorted(os.listdir(out)):
            data = open(os.path.join(out, fn), "rb").read()
            files[fn] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        json.dump({"files": files, "version": 1}, open(os.path.join(out, "PINS.json"), "w"), indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
