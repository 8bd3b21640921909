#!/bin/sh
# modelmem's KV capacity against each engine's own formula on the same device and model:
# public-shaped checkpoints (bench/serving/checkpoints.py: config.json + safetensors headers over
# sparse files) on one 80 GiB device, context 8192, 1 GiB overhead. The activations of these
# checkpoints are the config formula's (docs/serving.md), sized on the caching pool with the
# weights (the need): the comparison is of the formulas on the same figures, not of runs. Prints a
# Markdown table.
#   bench/serving/engines.sh [BUILD]
set -eu
build=${1:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 "$(dirname "$0")/checkpoints.py" "$dir" >/dev/null
echo "| model | weights | activations: peak / on caching | KV/token | modelmem KV tokens | concurrency at 8192 | vLLM 0.90 | SGLang 0.90 | TensorRT-LLM 0.90 |"
echo "|---|---|---|---|---|---|---|---|---|"
for m in llama2_7b llama3_8b mistral_7b qwen2_7b deepseek_v2_lite; do
  "$build/modelmem" plan --serve "$dir/$m" --device-memory 80GiB --context 8192 \
    --overhead 1GiB -o "$dir/$m.json" >/dev/null
  python3 - "$dir/$m.json" "$m" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
f = j["engine_formulas"]
gib = lambda b: f"{b / 2**30:.2f} GiB"
def eng(name):
    t = f[name]["default_kv_tokens"]
    return f"{t:,} ({100 * (t - j['kv_tokens']) / j['kv_tokens']:+.1f} %)"
print(f"| {sys.argv[2]} | {gib(j['weights_bytes'])} | "
      f"{gib(j['activation_peak_bytes'])} / {gib(j['activation_bytes'])} | "
      f"{j['kv_bytes_per_token']:,} B | {j['kv_tokens']:,} | {j['max_concurrency']:.2f}x | "
      f"{eng('vllm')} | {eng('sglang')} | {eng('tensorrt_llm')} |")
PY
done
