#!/bin/sh
# The deployments of the seed as modelmem configuration strings on an Ascend NPU. Each line
# sets MODELMEM_ALLOC_CONF for one process using libmodelmem_npu_alloc.so (see
# torch_npu_example.py); `modelmem config "$MODELMEM_ALLOC_CONF"` prints what it builds.
#   sh examples/ascend/scenarios.sh build/modelmem     (checks every line; needs an NPU, or
#   MODELMEM_ACL_LIBRARY=build/emulated_acl/libascendcl.so for the tests' emulated runtime)
# The sizes fit a 1 GiB device (the emulated runtime's default); scale them to your HBM.
set -e
MODELMEM=${1:-modelmem}
MODEL=${2:-models/resnet50.onnx}
SECOND=${3:-models/bert_base.onnx}
PLAN=${TMPDIR:-/tmp}/resnet50_plan.json

# 1. "expandable_segments is not supported": the seed's string. Without virtual memory one
#    warning names the device, the reason and the fallback (torch_npu's: the caching pool with
#    fixed-size segments), and the run goes on; fallback:error refuses instead.
EXPANDABLE="device:npu,expandable_segments:True"

# 2. A static pool instead of dynamic growth, sized from the model's plan (activations + weights,
#    x 1.2 for safety): `modelmem plan` writes the plan file first.
"$MODELMEM" plan "$MODEL" --dim batch=8 -o "$PLAN" >/dev/null
STATIC_FROM_PLAN="device:npu,strategy:static,plan:$PLAN,safety_factor:1.2"

# 3. A static pool of a chosen size, or a per-model-family preset.
STATIC_FIXED="device:npu,strategy:static,static_pool_mb:512"
STATIC_PRESET="device:npu,strategy:static,model_type:cnn"

# 4. Per-model pools on one NPU in one process: `modelmem plan --device-memory` gives each model
#    a pool (named after its file) and its quota; threads select theirs with modelmem.pool(name)
#    or modelmem_npu_pool_push(name). --overhead 0: the emulated runtime of the tests keeps no
#    context of its own; on an Ascend device leave out --overhead (the NPU default is 1 GiB).
#    The quotas are for torch_npu, which runs the models eagerly: that is the default with
#    --device-memory (--runtime static sizes them for a static executor such as MindSpore's
#    graph mode or ONNX Runtime, and such quotas overflow under torch_npu).
POOLS="device:npu,$("$MODELMEM" plan "$MODEL" "$SECOND" --dim batch=1 --dim seq=128 \
  --device-memory 1GiB --device-kind npu --overhead 0 |
  grep -o 'pools:\[[^]]*\]' | tail -n 1)"

# 5. Or one process per model, each with its own static pool and name (MODELMEM_POOL_NAME), side
#    by side in `modelmem info` and `modelmem top`.
BERT_POOL="device:npu:0,strategy:static,static_pool_mb:512"      # MODELMEM_POOL_NAME=bert
RESNET_POOL="device:npu:0,strategy:static,static_pool_mb:256"    # MODELMEM_POOL_NAME=resnet50

# 6. A repeating inference loop served from a planned arena learned from marked steps
#    (modelmem_npu_begin_step / modelmem_npu_end_step around each step).
PLANNED="device:npu,strategy:planned,planned_steps:marked,planned_fallback:caching"

# 7. Watching (no string of its own): `modelmem info` / `modelmem top` show each process's pools
#    on npu:N beside the NPU's HBM (the seed's npu-smi view), and modelmem.MemoryLogger logs every
#    NPU allocation and free of any line above with its device, pool, size, stream and Python line
#    (docs/ascend.md, "Listening to allocations"; tests/acl/npu_pluggable_test.py runs both).

for conf in "$EXPANDABLE" "$STATIC_FROM_PLAN" "$STATIC_FIXED" "$STATIC_PRESET" "$POOLS" \
    "$BERT_POOL" "$RESNET_POOL" "$PLANNED"; do
  "$MODELMEM" config "$conf" | grep '^allocator:'
done
