#!/usr/bin/env bash
# GPU check for issue 12: profile this machine's GPU, predict a bf16 plan with sailor-sim, train it with
# pretrain_gpt.py (nccl, bf16, tied embeddings, dropout 0.1) and compare predicted vs measured iteration
# time and peak memory.
#
# It CANNOT run in CI or on the CPU-only development machines (it needs NVIDIA GPUs with bf16, i.e. Ampere
# or newer, and nccl). Run it from the repository root on a machine with 1..8 GPUs:
#
#     bash benchmarks/gpu_check.sh                 # all visible GPUs; OUT=runs/gpu_check by default
#     CUDA_VISIBLE_DEVICES=0 bash benchmarks/gpu_check.sh
#
# Budget: < 8 minutes on one GPU (profile ~1-2 min, 40 training iterations, imports).
# Output: a table (predicted, measured, error) and a last line "gpu check: PASS" or "gpu check: FAIL (...)".
# Exit status: 0 all checks passed; 1 a check failed; 2 no usable GPU / a step crashed.
# Checks (sanity bounds for a tiny-ish model, not accuracy goals):
#   - training ran, no step skipped, the loss went down;
#   - the model really is 16-bit: fp32 main weights = 2 x the 16-bit parameter bytes on every rank;
#   - measured median iteration time within +-50% of sailor-sim's prediction (profiled with CUDA events);
#   - measured peak allocated memory (torch.cuda.max_memory_allocated, max over ranks) within +-35% of the
#     predicted peak minus the preset's constant overhead.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
ITERS=${ITERS:-40}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
die() { echo "error: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs NVIDIA GPUs"
NGPU=$(python -c "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)")
[[ "$NGPU" -ge 1 ]] || die "torch sees no CUDA device"
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_bf16_supported() else 1)" \
  || die "this GPU has no bf16 (pre-Ampere): the check trains in bf16"
NGPU=$(( NGPU > 8 ? 8 : NGPU ))
echo "GPUs: $NGPU x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"

cat > "$OUT/model.json" <<'JSON'
{"name": "gpu-check", "num_layers": 8, "hidden_size": 1024, "num_heads": 16, "ffn_hidden_size": 4096,
 "seq_length": 1024, "vocab_size": 32000, "max_position_embeddings": 1024, "tied_embeddings": true}
JSON

# 1. profile (CUDA events; allocator statistics for activation bytes) -> profile + catalog entry "gpu-check"
python -m megatron_sailor.profiler.cli --model "$OUT/model.json" --mbs 2 --tp 1 --warmup 3 --repeats 10 \
  --gpu-type gpu-check --catalog-out "$OUT/catalog.json" -o "$OUT/profile.json" > "$OUT/profile.log" 2>&1 \
  || { tail -5 "$OUT/profile.log" >&2; die "profiling failed (see $OUT/profile.log)"; }

# 2. the plan: one stage, one TP-1 replica per GPU, bf16, tied embeddings
python - "$OUT/plan.json" "$NGPU" <<'PY'
import json, sys
n = int(sys.argv[2])
reps = [{"gpu_type": "gpu-check", "tp": 1, "zone": "local"} for _ in range(n)]
json.dump({"schema_version": 1, "model": "gpu-check", "num_layers": 8, "micro_batch_size": 2,
           "global_batch_size": 8 * n, "precision": "bf16", "tie_embeddings": True,
           "stages": [{"first_layer": 0, "num_layers": 8, "replicas": reps}]}, open(sys.argv[1], "w"))
PY

# 3. prediction
python -m planner.cli_sim "$OUT/plan.json" --model "$OUT/model.json" --profiles "$OUT/profile.json" \
  --gpu-catalog "$OUT/catalog.json" --json > "$OUT/prediction.json" || die "sailor-sim failed"

# 4. the run
MODEL_ARGS=(--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --ffn-hidden-size 4096 --seq-length 1024
            --max-position-embeddings 1024 --vocab-size 32000)
PORT=$(python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
python -m torch.distributed.run --nproc-per-node "$NGPU" --master-addr 127.0.0.1 --master-port "$PORT" \
  examples/gpt/pretrain_gpt.py --sailor-plan "$OUT/plan.json" "${MODEL_ARGS[@]}" --bf16 --mock-data \
  --train-iters "$ITERS" --lr 1e-4 --metrics-file "$OUT/metrics.jsonl" --log-interval 10 > "$OUT/train.log" 2>&1 \
  || { tail -5 "$OUT/train.log" >&2; die "training failed (see $OUT/train.log)"; }

# 5. compare
python - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
pred = json.load(open(f"{out}/prediction.json"))
rows = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
steady = rows[10:] or rows
t_meas = statistics.median(r["iteration_time_s"] for r in steady)
t_pred = pred["iteration_time_s"]
mem = rows[-1]["memory"]
m_meas = max(r["cuda_max_allocated_bytes"] for r in mem)
overhead = 1.0 * 1024 ** 3     # the megatron-sailor preset's constant (context, communicators): not allocated by torch
m_pred = pred["peak_memory_bytes"] - overhead
errors = []
print(f"{'quantity':30s} {'predicted':>14s} {'measured':>14s} {'error':>8s}")
for name, p, m, bound in (("iteration time (s)", t_pred, t_meas, 0.50), ("peak memory (bytes)", m_pred, m_meas, 0.35)):
    e = (p - m) / m
    print(f"{name:30s} {p:>14,.4f} {m:>14,.4f} {e:>+8.1%}")
    if abs(e) > bound:
        errors.append(f"{name} off by {e:+.0%} (bound {bound:.0%})")
if any(r["skipped"] for r in rows):
    errors.append("a bf16 step was skipped")
if not rows[-1]["loss"] < rows[0]["loss"]:
    errors.append(f"loss did not go down ({rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f})")
for rank, r in enumerate(mem):
    if r["main_weights_bytes"] != 2 * r["params_bytes"]:
        errors.append(f"rank {rank}: main weights {r['main_weights_bytes']} B != 2 x 16-bit params {r['params_bytes']} B")
print("gpu check: PASS" if not errors else "gpu check: FAIL (" + "; ".join(errors) + ")")
sys.exit(1 if errors else 0)
PY
