"""GGUF files of the engine tests' model families (families.py), written here with the `gguf`
package's GGUFWriter: llama.cpp's own converter (convert_hf_to_gguf.py) is not on PyPI, so this
maps a transformers model's tensors to the names llama.cpp loads (token_embd, blk.N.attn_q, ...)
and writes the metadata its loader reads. Weights are random (what is tested is memory). 2-D
weights are stored as f16 or q8_0 (the gguf package quantises q8_0; its quantize() has no
k-quants, so q4_K files come from llama.cpp's own quantizer through llama-cpp-python where it is
installed); norms and biases stay f32, as llama.cpp's converter keeps them. The vocabulary is a
small SentencePiece-style one made here (byte tokens and fillers), no tokenizer is downloaded."""

import numpy as np

# family -> llama.cpp architecture
ARCH = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2", "gemma2": "gemma2",
        "mixtral": "llama"}  # llama.cpp loads Mixtral as a llama with experts


def _names(family, name):
    """The llama.cpp name of a transformers tensor (None: not written), and whether to transpose
    it (GPT-2's Conv1D keeps weights as [in, out])."""
    if family == "gpt2":
        name = name.removeprefix("transformer.")
        fixed = {"wte.weight": "token_embd.weight", "wpe.weight": "position_embd.weight",
                 "ln_f.weight": "output_norm.weight", "ln_f.bias": "output_norm.bias"}
        if name in fixed:
            return fixed[name], False
        if name == "lm_head.weight":
            return None, False  # tied to wte: llama.cpp takes token_embd for the output
        parts = name.split(".")  # h.N.attn.c_attn.weight
        n, rest = parts[1], ".".join(parts[2:])
        table = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
                 "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
        module, kind = rest.rsplit(".", 1)
        return f"blk.{n}.{table[module]}.{kind}", kind == "weight" and module not in (
            "ln_1", "ln_2")
    fixed = {"model.embed_tokens.weight": "token_embd.weight",
             "model.norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}
    if family == "gemma2" and name == "lm_head.weight":
        return None, False  # tied: llama.cpp's gemma2 takes token_embd for the output
    if name in fixed:
        return fixed[name], False
    parts = name.split(".")  # model.layers.N.self_attn.q_proj.weight
    n, module, kind = parts[2], ".".join(parts[3:-1]), parts[-1]
    table = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    # Mixtral (transformers 5: the experts stacked, gate and up fused): its router; the experts'
    # tensors are split and named in write()
    table["mlp.gate"] = "ffn_gate_inp"
    if family == "gemma2":  # a norm after attention and on each side of the MLP
        table.update({"post_attention_layernorm": "post_attention_norm",
                      "pre_feedforward_layernorm": "ffn_norm",
                      "post_feedforward_layernorm": "post_ffw_norm"})
    return f"blk.{n}.{table[module]}.{kind}", False


def _vocab(n):
    """A SentencePiece-style vocabulary of n tokens: <unk>, <s>, </s>, the 256 byte tokens,
    then fillers. Token types: 1 normal, 2 unknown, 3 control, 6 byte."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    tokens += [f"\u2581t{i}" for i in range(n - len(tokens))]
    types += [1] * (n - len(types))
    return tokens, [0.0] * 3 + [-1000.0] * 256 + [-float(i) for i in range(n - 259)], types


def write(model, path, kind):
    """Writes `model` (a transformers causal LM of a family of ARCH) to `path` as GGUF with its
    2-D weights in `kind` ("f16" or "q8_0"). Returns the tensors' data bytes, summed."""
    import gguf

    family = model.config.model_type
    arch = ARCH[family]
    c = model.config
    qtype = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0}[kind]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"modelmem-test-{family}")
    w.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind])
    if family == "gpt2":
        w.add_context_length(c.n_positions)
        w.add_embedding_length(c.n_embd)
        w.add_block_count(c.n_layer)
        w.add_feed_forward_length(c.n_inner or 4 * c.n_embd)
        w.add_head_count(c.n_head)
        w.add_layer_norm_eps(c.layer_norm_epsilon)
    else:
        w.add_context_length(c.max_position_embeddings)
        w.add_embedding_length(c.hidden_size)
        w.add_block_count(c.num_hidden_layers)
        w.add_feed_forward_length(c.intermediate_size)
        w.add_head_count(c.num_attention_heads)
        w.add_head_count_kv(c.num_key_value_heads)
        w.add_layer_norm_rms_eps(c.rms_norm_eps)
        w.add_rope_freq_base(10000.0)
    if family == "mixtral":
        w.add_expert_count(c.num_local_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
    if family == "gemma2":
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
        w.add_sliding_window(c.sliding_window)
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    tokens, scores, types = _vocab(c.vocab_size)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    total = 0
    tensors = []  # (llama.cpp name, array)
    for name, t in model.state_dict().items():
        if name.endswith(".attn.bias") or name.endswith(".attn.masked_bias"):
            continue  # GPT-2's causal mask buffers in older transformers
        a = t.detach().float().numpy()
        if ".mlp.experts." in name:  # [experts, 2 x ff, hidden]: ffn_gate_exps, ffn_up_exps
            block = f"blk.{name.split('.')[2]}"
            if name.endswith("gate_up_proj"):
                ff = a.shape[1] // 2
                tensors += [(f"{block}.ffn_gate_exps.weight", np.ascontiguousarray(a[:, :ff])),
                            (f"{block}.ffn_up_exps.weight", np.ascontiguousarray(a[:, ff:]))]
            else:  # down_proj [experts, hidden, ff]
                tensors.append((f"{block}.ffn_down_exps.weight", a))
            continue
        gname, transpose = _names(family, name)
        if gname is None:
            continue
        if transpose:
            a = np.ascontiguousarray(a.T)
        tensors.append((gname, a))
    for gname, a in tensors:
        if gname.endswith("ffn_gate_inp.weight"):  # the router stays f32, as llama.cpp's converter
            data = a.astype(np.float32)
            w.add_tensor(gname, data)
        elif a.ndim >= 2 and qtype != gguf.GGMLQuantizationType.F16:
            data = gguf.quants.quantize(a, qtype)
            w.add_tensor(gname, data, raw_dtype=qtype)
        elif a.ndim >= 2:
            data = a.astype(np.float16)
            w.add_tensor(gname, data)
        else:
            data = a.astype(np.float32)
            w.add_tensor(gname, data)
        total += data.nbytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return total
