#!/bin/sh
# The deployments of the seed as modelmem configuration strings on an Ascend NPU. Each line
# sets MODELMEM_ALLOC_CONF for one process using libmodelmem_npu_alloc.so (see
# torch_npu_example.py); `modelmem config "$MODELMEM_ALLOC_CONF"` prints what it builds.
#   sh examples/ascend/scenarios.sh build/modelmem     (checks every line; needs an NPU, or
#   MODELMEM_ACL_LIBRARY=build/emulated_acl/libascendcl.so for the tests' emulated runtime)
set -e
MODELMEM=${1:-modelmem}
MODEL=${2:-models/resnet50.onnx}
PLAN=${TMPDIR:-/tmp}/resnet50_plan.json

# 1. "expandable_segments is not supported": ask for it and choose what happens without it.
#    One warning names the device, the reason and the fallback; fallback:error refuses instead.
EXPANDABLE="device:npu,expandable_segments:True,fallback:caching"

# 2. A static pool instead of dynamic growth, sized from the model's plan (activations + weights,
#    x 1.2 for safety): `modelmem plan` writes the plan file first.
"$MODELMEM" plan "$MODEL" --dim batch=8 --json "$PLAN" >/dev/null
STATIC_FROM_PLAN="device:npu,strategy:static,plan:$PLAN,safety_factor:1.2"

# 3. A static pool of a chosen size, or a per-model-family preset.
STATIC_FIXED="device:npu,strategy:static,static_pool_mb:8192"
STATIC_PRESET="device:npu,strategy:static,model_type:transformer"

# 4. Per-model pools on one NPU: one process per model, each with its own static pool and name
#    (MODELMEM_POOL_NAME), side by side in `modelmem info` and `modelmem top`.
BERT_POOL="device:npu:0,strategy:static,static_pool_mb:512"      # MODELMEM_POOL_NAME=bert
RESNET_POOL="device:npu:0,strategy:static,static_pool_mb:256"    # MODELMEM_POOL_NAME=resnet50
GAN_POOL="device:npu:0,strategy:static,model_type:gan,safety_factor:1.0"  # MODELMEM_POOL_NAME=gan

# 5. A repeating inference loop served from a planned arena learned from marked steps
#    (modelmem_npu_begin_step / modelmem_npu_end_step around each step).
PLANNED="device:npu,strategy:planned,planned_steps:marked,planned_fallback:caching"

for conf in "$EXPANDABLE" "$STATIC_FROM_PLAN" "$STATIC_FIXED" "$STATIC_PRESET" "$BERT_POOL" \
    "$RESNET_POOL" "$GAN_POOL" "$PLANNED"; do
  "$MODELMEM" config "$conf" | grep '^allocator:'
done
