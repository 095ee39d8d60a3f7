#!/usr/bin/env python3
"""Builds tiny random Qwen3-MoE and Llama checkpoints plus their Hugging Face fp32 logits, the oracles for
gridq's qwen3_moe and llama adapters (tests/runtime/arch_parity_test.cpp).

Needs torch and transformers 5.x. Weights are drawn at a scale that gives well-separated logits, rounded to
BF16 and saved with save_pretrained; the reference logits come from reloading that directory with
dtype=float32 (BF16 values upcast, as for the Laguna fixture) and eager attention.

  python3 scripts/make_parity_fixtures.py --out /tmp/fx   # then copy into tests/fixtures/
Writes OUT/fixtures.tar holding qwen3-moe-tiny/, llama-tiny/ and <name>.hf-logits.safetensors.
"""
import argparse
import json
import os
import tarfile

import torch
from safetensors.torch import save_file
import transformers
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms: around 1 so they matter
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.5 / fan_in ** 0.5))


def build(name, cfg, cls, seed, out_dir):
    torch.manual_seed(seed)
    model = cls(cfg).to(torch.float32)
    randomize(model, seed)
    model = model.to(torch.bfloat16)
    d = os.path.join(out_dir, name)
    model.save_pretrained(d, safe_serialization=True)
    ref = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (2, 40), generator=g, dtype=torch.int64)
    with torch.no_grad():
        logits = ref(input_ids=ids).logits.float().contiguous()
    save_file({"input_ids": ids.to(torch.int32).contiguous(), "logits": logits},
              os.path.join(out_dir, f"{name}.hf-logits.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    top2 = logits.topk(2, dim=-1).values
    print(name, "files", sorted(os.listdir(d)), "logit std %.3f" % logits.std().item(),
          "min top1-top2 gap %.4g" % (top2[..., 0] - top2[..., 1]).min().item())
    with open(os.path.join(d, "config.json")) as f:
        print(json.dumps(json.load(f), indent=None)[:1500])
    from safetensors import safe_open
    with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        print(name, "tensors:", sorted(f.keys())[:12], "...")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import tempfile
    out = tempfile.mkdtemp(prefix="gridq-fixtures-")  # only the tar goes to --out

    qcfg = Qwen3MoeConfig(vocab_size=512, hidden_size=256, intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=6,
                          num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                          decoder_sparse_step=1, mlp_only_layers=[0], max_position_embeddings=512,
                          rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
                          pad_token_id=2)
    build("qwen3-moe-tiny", qcfg, Qwen3MoeForCausalLM, 1234, out)

    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    lcfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                       rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
                       rope_parameters=rope)
    build("llama-tiny", lcfg, LlamaForCausalLM, 5678, out)

    with tarfile.open(os.path.join(args.out, "fixtures.tar"), "w") as tar:
        for entry in sorted(os.listdir(out)):
            tar.add(os.path.join(out, entry), arcname=entry)
    print("wrote", os.path.join(args.out, "fixtures.tar"))


if __name__ == "__main__":
    main()
