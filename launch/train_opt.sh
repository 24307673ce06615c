#!/usr/bin/env bash
# Train a tiny OPT-shaped model on this machine's CPUs with a heterogeneous plan (no GPU needed).
#
#   bash launch/train_opt.sh
#
# 1. declares a small local "cluster": A100-40 x3 in zone local-a, V100-16 x2 in zone local-b (GPU types are
#    labels on CPU); 2. gets a plan: by default the built-in heterogeneous plan below (uneven layers 2|4,
#    replicas with TP 2 and TP 1, two zones, 5|3 micro-batches per pipeline); PLAN_SOURCE=planner asks
#    sailor-plan for the declared cluster instead (for this tiny model it sensibly picks fewer GPUs);
# 3. builds the byte-level corpus; 4. trains under torchrun (gloo) with zone-hierarchical gradient sync.
# Why 5 ranks: uneven stages (S >= 2) x two zones (D >= 2) x a TP-2 replica needs at least 2*D+1 = 5 ranks.
# The two zones are emulated in the application: every message between ranks of different zones is delayed
# by ZONE_LATENCY_S (default 0.002) + bytes / ZONE_GBPS (default 1 Gbit/s).
# Environment knobs: ITERS (default 40), GRAD_SYNC (hierarchical|flat), PLAN_SOURCE (builtin|planner), OUT,
# ZONE_LATENCY_S, ZONE_GBPS.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/train_opt}
ITERS=${ITERS:-40}
GRAD_SYNC=${GRAD_SYNC:-hierarchical}
PLAN_SOURCE=${PLAN_SOURCE:-builtin}
ZONE_LATENCY_S=${ZONE_LATENCY_S:-0.002}
ZONE_GBPS=${ZONE_GBPS:-1}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

cat > "$OUT/cluster.yaml" <<'YAML'
pools:
  - {gpu_type: A100-40, zone: local-a, count: 3, gpus_per_node: 4}
  - {gpu_type: V100-16, zone: local-b, count: 2, gpus_per_node: 4}
YAML

MODEL_ARGS=(--num-layers 6 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 256 --seq-length 64
            --max-position-embeddings 64 --vocab-size 128 --make-vocab-size-divisible-by 8)

if [[ "$PLAN_SOURCE" == "planner" ]]; then
  cat > "$OUT/model.json" <<'JSON'
{"name": "tiny-opt", "num_layers": 6, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256,
 "seq_length": 64, "vocab_size": 128, "max_position_embeddings": 64, "make_vocab_size_divisible_by": 8}
JSON
  python -m planner.cli_plan --model "$OUT/model.json" --cluster "$OUT/cluster.yaml" --gbs 16 \
      --no-comparator -o "$OUT/plan.json"
else
  cat > "$OUT/plan.json" <<'JSON'
{"schema_version": 1, "model": "tiny-opt", "num_layers": 6, "micro_batch_size": 2, "global_batch_size": 16,
 "microbatches_per_pipeline": [5, 3],
 "stages": [
  {"first_layer": 0, "num_layers": 2, "replicas": [{"gpu_type": "A100-40", "tp": 2, "zone": "local-a"},
                                                   {"gpu_type": "V100-16", "tp": 1, "zone": "local-b"}]},
  {"first_layer": 2, "num_layers": 4, "replicas": [{"gpu_type": "A100-40", "tp": 1, "zone": "local-a"},
                                                   {"gpu_type": "V100-16", "tp": 1, "zone": "local-b"}]}]}
JSON
fi
NPROC=$(python -c "from planner.plan import Plan; print(Plan.load('$OUT/plan.json').world_size)")

python -m megatron_sailor.preprocess --input examples/gpt/data/sample_corpus.txt --output-prefix "$OUT/corpus"
PORT=$(python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
echo "training on $NPROC CPU ranks (gloo), grad sync: $GRAD_SYNC, emulated cross-zone link: ${ZONE_LATENCY_S} s + ${ZONE_GBPS} Gbit/s"
python -m torch.distributed.run --nproc-per-node "$NPROC" --master-addr 127.0.0.1 --master-port "$PORT" \
    examples/gpt/pretrain_gpt.py --sailor-plan "$OUT/plan.json" "${MODEL_ARGS[@]}" \
    --train-iters "$ITERS" --lr 3e-3 --seed 1234 --data-path "$OUT/corpus" --grad-sync "$GRAD_SYNC" \
    --emulate-cross-zone-latency-s "$ZONE_LATENCY_S" --emulate-cross-zone-gbps "$ZONE_GBPS" \
    --metrics-file "$OUT/metrics.jsonl" --log-interval 5 2> >(grep -v -e '^W[0-9]' -e '^\*\*\*' -e 'OMP_NUM_THREADS' >&2)
python - "$OUT/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
first, last = rows[0]["loss"], statistics.mean(r["loss"] for r in rows[-5:])
steady = rows[3:] or rows
print(f"loss {first:.3f} -> {last:.3f} (mean of the last 5); median {statistics.median(r['tokens_per_s'] for r in steady):,.0f} "
      f"tokens/s, {statistics.median(r['iteration_time_s'] for r in steady) * 1e3:.1f} ms/iteration")
PY
