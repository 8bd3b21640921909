#!/usr/bin/env python3
"""Writes Hugging Face checkpoint folders shaped like public models, without weights.

  checkpoints.py DIR

writes DIR/<name>/config.json with the model's published config values and model.safetensors
holding every tensor of the architecture in its header, the data a hole (a sparse file: no disk
space, no data). `modelmem plan --serve DIR/<name>` reads them as it reads a real checkpoint (the
header only). Names: llama2_7b, llama3_8b, llama3_2_1b, mistral_7b, qwen2_7b, qwen3_14b,
deepseek_v2_lite (llama3_2_1b and qwen3_14b: the models of the real engine logs compared in
docs/benchmarks.md, "engines").
"""
import json
import os
import struct
import sys

MODELS = {
    "llama2_7b": dict(model_type="llama", num_hidden_layers=32, hidden_size=4096,
                      num_attention_heads=32, num_key_value_heads=32, intermediate_size=11008,
                      vocab_size=32000, max_position_embeddings=4096, torch_dtype="float16"),
    "llama3_8b": dict(model_type="llama", num_hidden_layers=32, hidden_size=4096,
                      num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                      vocab_size=128256, max_position_embeddings=8192, torch_dtype="bfloat16"),
    "llama3_2_1b": dict(model_type="llama", num_hidden_layers=16, hidden_size=2048,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                        intermediate_size=8192, vocab_size=128256,
                        max_position_embeddings=131072, tie_word_embeddings=True,
                        rope_scaling=dict(rope_type="llama3", factor=32.0,
                                          original_max_position_embeddings=8192),
                        torch_dtype="bfloat16"),
    "qwen3_14b": dict(model_type="qwen3", num_hidden_layers=40, hidden_size=5120,
                      num_attention_heads=40, num_key_value_heads=8, head_dim=128,
                      intermediate_size=17408, vocab_size=151936, max_position_embeddings=40960,
                      tie_word_embeddings=False, torch_dtype="bfloat16"),
    "mistral_7b": dict(model_type="mistral", num_hidden_layers=32, hidden_size=4096,
                       num_attention_heads=32, num_key_value_heads=8, intermediate_size=14336,
                       vocab_size=32000, max_position_embeddings=32768, sliding_window=4096,
                       torch_dtype="bfloat16"),
    "qwen2_7b": dict(model_type="qwen2", num_hidden_layers=28, hidden_size=3584,
                     num_attention_heads=28, num_key_value_heads=4, intermediate_size=18944,
                     vocab_size=152064, max_position_embeddings=32768, sliding_window=131072,
                     use_sliding_window=False, max_window_layers=28, torch_dtype="bfloat16"),
    "deepseek_v2_lite": dict(model_type="deepseek_v2", num_hidden_layers=27, hidden_size=2048,
                             num_attention_heads=16, num_key_value_heads=16,
                             intermediate_size=10944, moe_intermediate_size=1408,
                             n_routed_experts=64, n_shared_experts=2, first_k_dense_replace=1,
                             kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
                             v_head_dim=128, vocab_size=102400, max_position_embeddings=163840,
                             torch_dtype="bfloat16"),
}


def tensors(c):
    h, v = c["hidden_size"], c["vocab_size"]
    out = [("model.embed_tokens.weight", [v, h]), ("model.norm.weight", [h])]
    if not c.get("tie_word_embeddings"):
        out.append(("lm_head.weight", [v, h]))
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h])]
        if "kv_lora_rank" in c:
            r, rope, nope, vd = (c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"],
                                 c["v_head_dim"])
            out += [(p + "self_attn.q_proj.weight", [heads * (nope + rope), h]),
                    (p + "self_attn.kv_a_proj_with_mqa.weight", [r + rope, h]),
                    (p + "self_attn.kv_a_layernorm.weight", [r]),
                    (p + "self_attn.kv_b_proj.weight", [heads * (nope + vd), r]),
                    (p + "self_attn.o_proj.weight", [h, heads * vd])]
        else:
            d = c.get("head_dim", h // heads)
            bias = c["model_type"] == "qwen2"
            for name, rows in (("q", heads * d), ("k", kv * d), ("v", kv * d)):
                out.append((p + f"self_attn.{name}_proj.weight", [rows, h]))
                if bias:
                    out.append((p + f"self_attn.{name}_proj.bias", [rows]))
            out.append((p + "self_attn.o_proj.weight", [h, heads * d]))
            if c["model_type"] == "qwen3":
                out += [(p + "self_attn.q_norm.weight", [d]), (p + "self_attn.k_norm.weight", [d])]
        experts = c.get("n_routed_experts", 0)
        if experts and i >= c.get("first_k_dense_replace", 0):
            m = c["moe_intermediate_size"]
            out.append((p + "mlp.gate.weight", [experts, h]))
            for e in list(range(experts)) + ["shared"]:
                width = m * c["n_shared_experts"] if e == "shared" else m
                q = p + ("mlp.shared_experts." if e == "shared" else f"mlp.experts.{e}.")
                out += [(q + "gate_proj.weight", [width, h]), (q + "up_proj.weight", [width, h]),
                        (q + "down_proj.weight", [h, width])]
        else:
            m = c["intermediate_size"]
            out += [(p + "mlp.gate_proj.weight", [m, h]), (p + "mlp.up_proj.weight", [m, h]),
                    (p + "mlp.down_proj.weight", [h, m])]
    return out


def write(folder, config):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    dtype, size = ("F16", 2) if config["torch_dtype"] == "float16" else ("BF16", 2)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors(config):
        n = size
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path = os.path.join(folder, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
    os.truncate(path, 8 + len(text) + offset)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, config in MODELS.items():
        write(os.path.join(sys.argv[1], name), config)
        print(os.path.join(sys.argv[1], name))
