"""Checkpoints as transformers writes them, against `modelmem plan --serve` (CTest
runtimes.checkpoints).

For each family the serving plan knows, a tiny random-weight model is made from a config written
here (no hub), saved with `save_pretrained` in shards with an index, in bf16, fp16 and fp32, and:
- the weight bytes `plan --serve` gives equal the tensor bytes of the files (safetensors' own
  reader: every tensor's element count times its dtype's size, a float32 MoE router included);
- its KV bytes per token equal what transformers' own cache holds per token after a real
  `generate` (DynamicCache: each layer's keys and values; a sliding-window layer holds every token
  while the sequence is shorter than its window; DeepSeek-V2 stores the compressed latent and the
  rotary key, as vLLM does).
"""
import glob
import json
import math
import os
import subprocess

import pytest

torch = pytest.importorskip("torch", reason="no torch in the interpreter (scripts/setup --runtimes)")
transformers = pytest.importorskip("transformers",
                                   reason="no transformers in the interpreter (scripts/setup --runtimes)")
safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open  # noqa: E402

BUILD = os.environ.get("MODELMEM_BINARY_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
CLI = os.path.join(BUILD, "modelmem")

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def configs():
    t = transformers
    return {
        "llama": lambda: t.LlamaConfig(**COMMON, tie_word_embeddings=True),
        "mistral": lambda: t.MistralConfig(**COMMON, sliding_window=64),
        "qwen2": lambda: t.Qwen2Config(**COMMON),
        "gemma2": lambda: t.Gemma2Config(**COMMON, head_dim=16, sliding_window=32),
        "mixtral": lambda: t.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2),
        "phi3": lambda: t.Phi3Config(**COMMON, pad_token_id=0),
        "gpt2": lambda: t.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4,
                                     n_positions=256),
        "gpt_neox": lambda: t.GPTNeoXConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            max_position_embeddings=256),
        "deepseek_v2": lambda: t.DeepseekV2Config(
            vocab_size=128, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
            num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16,
            q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
            max_position_embeddings=256),
    }


FAMILIES = sorted(configs())
DTYPES = ["bfloat16", "float16", "float32"]
PROMPT, NEW = 12, 6  # shorter than every window: every layer holds every token


def files_tensor_bytes(folder):
    total = 0
    for path in glob.glob(os.path.join(folder, "*.safetensors")):
        with safe_open(path, "pt") as f:
            for name in f.keys():
                s = f.get_slice(name)
                size = torch.empty((), dtype=getattr(torch, {
                    "BF16": "bfloat16", "F16": "float16", "F32": "float32"}[s.get_dtype()]))
                total += math.prod(s.get_shape()) * size.element_size()
    return total


def cache_bytes_per_token(model):
    ids = torch.randint(0, 128, (1, PROMPT))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False,
                             return_dict_in_generate=True, pad_token_id=0)
    cache = out.past_key_values
    tokens = cache.get_seq_length()
    assert tokens == PROMPT + NEW - 1  # the last token generated is never fed back
    held = 0
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            assert t.shape[-2] == tokens, "a layer dropped tokens: the sequence passed a window"
            held += t.numel() * t.element_size()
    assert held % tokens == 0
    return held // tokens


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}
    root = tmp_path_factory.mktemp("checkpoints")
    for family in FAMILIES:
        for dtype in DTYPES:
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(
                configs()[family](), dtype=getattr(torch, dtype)).eval()
            folder = str(root / f"{family}-{dtype}")
            model.save_pretrained(folder, max_shard_size="40KB")
            made[(family, dtype)] = (folder, model)
    return made


def serve(folder):
    out = os.path.join(folder, "serve.json")
    r = subprocess.run([CLI, "plan", "--serve", folder, "--device-memory", "1GiB", "--context",
                        "128", "--overhead", "0", "-o", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        return json.load(f)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_weights_and_kv_per_token_are_the_files_and_transformers_cache(checkpoints, family, dtype):
    folder, model = checkpoints[(family, dtype)]
    shards = glob.glob(os.path.join(folder, "model-*-of-*.safetensors"))
    assert len(shards) > 1 and os.path.exists(os.path.join(folder, "model.safetensors.index.json"))
    plan = serve(folder)
    assert plan["source"] == "checkpoint"
    assert plan["weights_bytes"] == files_tensor_bytes(folder)
    assert plan["kv_bytes_per_token"] == cache_bytes_per_token(model)
    assert plan["kv_element_bytes"] == torch.empty((), dtype=getattr(torch, dtype)).element_size()


def test_a_stale_shard_beside_the_index_is_not_counted(checkpoints, tmp_path):
    folder, _ = checkpoints[("llama", "bfloat16")]
    copy = tmp_path / "llama"
    subprocess.run(["cp", "-r", folder, str(copy)], check=True)
    want = serve(str(copy))["weights_bytes"]
    # A shard of an earlier save that the index no longer names (save_pretrained leaves it).
    first = sorted(glob.glob(str(copy / "model-*-of-*.safetensors")))[0]
    subprocess.run(["cp", first, str(copy / "model-00001-of-00099.safetensors")], check=True)
    assert serve(str(copy))["weights_bytes"] == want
    # A shard the index names but the folder lacks is an error naming it.
    os.remove(first)
    r = subprocess.run([CLI, "plan", "--serve", str(copy), "--device-memory", "1GiB", "--context",
                        "128"], capture_output=True, text=True)
    assert r.returncode != 0 and r.stdout == ""
    assert os.path.basename(first) in r.stderr and len(r.stderr.strip().splitlines()) == 1
