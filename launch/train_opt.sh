#!/usr/bin/env bash
# Train a tiny OPT-shaped model on this machine's CPUs with a heterogeneous plan (no GPU needed).
#
#   bash launch/train_opt.sh
#
# 1. declares a small local "cluster": A100-40 x3 in zone local-a, RTX-3090 x2 in zone local-b (GPU types are
#    labels on CPU); 2. gets a plan: by default the built-in heterogeneous plan below (uneven layers 2|4,
#    replicas with TP 2 and TP 1, two zones, 5|3 micro-batches per pipeline; bf16, tied embeddings, full
#    activation recomputation, the distributed optimizer and
#    Megatron's default dropout 0.1); PLAN_SOURCE=planner asks
#    sailor-plan for the declared cluster instead (for this tiny model it sensibly picks fewer GPUs);
# 3. builds the byte-level corpus; 4. trains under torchrun (gloo) with zone-hierarchical gradient sync.
# Why 5 ranks: uneven stages (S >= 2) x two zones (D >= 2) x a TP-2 replica needs at least 2*D+1 = 5 ranks.
# The two zones are emulated in the application: every message between ranks of different zones is delayed
# by ZONE_LATENCY_S (default 0.002) + bytes / ZONE_GBPS (default 1 Gbit/s).
# Environment knobs: ITERS (default 40), GRAD_SYNC (hierarchical|flat), PLAN_SOURCE (builtin|planner), OUT,
# ZONE_LATENCY_S, ZONE_GBPS.
#
# Flags for the real thing (all optional; with none of them the behaviour above is unchanged):
#   --plan PLAN          train this plan (ours or a Sailor plan_config) instead of the built-in one
#   --nodes-file NODES   node inventory: launch with `python -m launch` (one torchrun per node, docs/LAUNCH.md)
#   --model NAME         built-in model (e.g. opt-350m) instead of the tiny OPT-shaped model
#   --data-path PREFIX   megatron .bin/.idx pair (default: the sample corpus, built into $OUT)
#   --corpus stdlib      train on this machine's Python standard library sources (present wherever Python is):
#                        a GPT-2-style BPE of 1024 tokens trained locally (tokenizers library, extra "text")
#   --iters N            training iterations (default $ITERS or 40)
#   --slurm              write $OUT/job.sbatch with `python -m launch.slurm` and submit it with sbatch
#   --dry-run            check the inputs and print the commands, run nothing
#   -- ARGS              extra arguments for examples/gpt/pretrain_gpt.py (or python -m launch.slurm options
#                        such as --partition, given before the -- through SLURM_ARGS="...")
# Bad input (a missing plan / inventory / data file, --slurm without --nodes-file or without sbatch, an
# inventory that cannot host the plan) prints one "error: ..." line naming it, exits 2 and launches nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "error: $*" >&2; exit 2; }
PLAN_FILE="" NODES_FILE="" MODEL_NAME="" DATA_PATH="" CORPUS="" SLURM=0 DRY_RUN=0 EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --plan) [[ $# -ge 2 ]] || die "--plan needs a file"; PLAN_FILE=$2; shift 2 ;;
    --nodes-file) [[ $# -ge 2 ]] || die "--nodes-file needs a file"; NODES_FILE=$2; shift 2 ;;
    --model) [[ $# -ge 2 ]] || die "--model needs a name"; MODEL_NAME=$2; shift 2 ;;
    --data-path) [[ $# -ge 2 ]] || die "--data-path needs a prefix"; DATA_PATH=$2; shift 2 ;;
    --corpus) [[ $# -ge 2 && "$2" == stdlib ]] || die "--corpus takes 'stdlib'"; CORPUS=$2; shift 2 ;;
    --iters) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || die "--iters needs a positive integer"; ITERS=$2; shift 2 ;;
    --slurm) SLURM=1; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument '$1' (see bash launch/train_opt.sh --help)" ;;
  esac
done
[[ -z "$PLAN_FILE" || -f "$PLAN_FILE" ]] || die "plan file not found: $PLAN_FILE"
[[ -z "$NODES_FILE" || -f "$NODES_FILE" ]] || die "node inventory not found: $NODES_FILE"
[[ -z "$DATA_PATH" || -z "$CORPUS" ]] || die "give --data-path or --corpus, not both"
if [[ -n "$DATA_PATH" ]]; then
  for ext in bin idx; do [[ -f "$DATA_PATH.$ext" ]] || die "data file not found: $DATA_PATH.$ext (--data-path)"; done
fi
if [[ $SLURM == 1 ]]; then
  [[ -n "$NODES_FILE" ]] || die "--slurm needs --nodes-file (the SLURM node names)"
  [[ -n "$PLAN_FILE" ]] || die "--slurm needs --plan (the built-in plan uses CPU labels, not cluster GPUs)"
  [[ $DRY_RUN == 1 ]] || command -v sbatch >/dev/null || die "sbatch not found on PATH (--slurm submits with sbatch; use --dry-run to only write the script)"
fi
OUT=${OUT:-runs/train_opt}
ITERS=${ITERS:-40}
GRAD_SYNC_FLAG=(); [[ -n "${GRAD_SYNC:-}" ]] && GRAD_SYNC_FLAG=(--grad-sync "$GRAD_SYNC")  # else the plan's, or hierarchical
GRAD_SYNC=${GRAD_SYNC:-hierarchical}
PLAN_SOURCE=${PLAN_SOURCE:-builtin}
ZONE_LATENCY_S=${ZONE_LATENCY_S:-0.002}
ZONE_GBPS=${ZONE_GBPS:-1}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

cat > "$OUT/cluster.yaml" <<'YAML'
pools:
  - {gpu_type: A100-40, zone: local-a, count: 3, gpus_per_node: 4}
  - {gpu_type: RTX-3090, zone: local-b, count: 2, gpus_per_node: 4}
YAML

MODEL_ARGS=(--num-layers 6 --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 256 --seq-length 64
            --max-position-embeddings 64 --vocab-size 128 --make-vocab-size-divisible-by 8)

if [[ -n "$MODEL_NAME" ]]; then
  python -c "import sys; from planner.model import get_model; get_model(sys.argv[1])" "$MODEL_NAME" 2>/dev/null \
    || die "unknown model '$MODEL_NAME' (built-in: tiny, opt-350m, gpt-neo-2.7b, llama-3-8b)"
  MODEL_ARGS=(--model "$MODEL_NAME")
fi

if [[ -n "$PLAN_FILE" ]]; then
  PLAN=$PLAN_FILE
  python -c "import sys; from planner.sailor_plan import load_any_plan; load_any_plan(sys.argv[1])" "$PLAN" >/dev/null \
    || die "cannot read the plan $PLAN (see the message above)"
elif [[ -n "$MODEL_NAME" ]]; then
  PLAN=$OUT/plan.json
  python -m planner.cli_plan --model "$MODEL_NAME" --cluster "$OUT/cluster.yaml" --gbs 16 --no-comparator -o "$PLAN"
elif [[ "$PLAN_SOURCE" == "planner" ]]; then
  cat > "$OUT/model.json" <<'JSON'
{"name": "tiny-opt", "num_layers": 6, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256,
 "seq_length": 64, "vocab_size": 128, "max_position_embeddings": 64, "make_vocab_size_divisible_by": 8}
JSON
  python -m planner.cli_plan --model "$OUT/model.json" --cluster "$OUT/cluster.yaml" --gbs 16 \
      --no-comparator -o "$OUT/plan.json"
  PLAN=$OUT/plan.json
else
  # Show what the planner would pick for this cluster, then train the built-in heterogeneous plan: for a model
  # this small the planner sensibly uses 1-2 GPUs, which would exercise none of the heterogeneous paths.
  cat > "$OUT/model.json" <<'JSON'
{"name": "tiny-opt", "num_layers": 6, "hidden_size": 64, "num_heads": 4, "ffn_hidden_size": 256,
 "seq_length": 64, "vocab_size": 128, "max_position_embeddings": 64, "make_vocab_size_divisible_by": 8}
JSON
  if [[ $DRY_RUN == 0 ]]; then
    python -m planner.cli_plan --model "$OUT/model.json" --cluster "$OUT/cluster.yaml" --gbs 16 --no-comparator \
        --json -o "$OUT/planner_choice.json" | python -c "
import json, sys
r = json.load(sys.stdin); e = r['estimate']; p = r['plan']
print(f\"planner's choice for this cluster: {len(p['stages'])} stage(s) x {len(p['stages'][0]['replicas'])} \"
      f\"pipeline(s) on {e['num_gpus']} GPU(s) (search {r['search_time_s']:.2f} s; its speed prediction is for \"
      f\"real A100/V100 GPUs, the labels of these CPU ranks, so none is shown) -> $OUT/planner_choice.json\")
print('training the built-in heterogeneous plan instead (uneven layers, TP 2 and 1, two zones):')"
  fi
  PLAN=$OUT/plan.json
  cat > "$OUT/plan.json" <<'JSON'
{"schema_version": 1, "model": "tiny-opt", "num_layers": 6, "micro_batch_size": 2, "global_batch_size": 16,
 "precision": "bf16", "tie_embeddings": true, "recompute_granularity": "full", "recompute_method": "uniform",
 "recompute_num_layers": 1, "distributed_optimizer": true,
 "microbatches_per_pipeline": [5, 3],
 "stages": [
  {"first_layer": 0, "num_layers": 2, "replicas": [{"gpu_type": "A100-40", "tp": 2, "zone": "local-a"},
                                                   {"gpu_type": "RTX-3090", "tp": 1, "zone": "local-b"}]},
  {"first_layer": 2, "num_layers": 4, "replicas": [{"gpu_type": "A100-40", "tp": 1, "zone": "local-a"},
                                                   {"gpu_type": "RTX-3090", "tp": 1, "zone": "local-b"}]}]}
JSON
fi
[[ -n "$PLAN_FILE" && -z "$MODEL_NAME" ]] && MODEL_ARGS=()   # the plan's named built-in model (or dims after --)
NPROC=$(python -c "import sys; from planner.sailor_plan import load_any_plan; print(load_any_plan(sys.argv[1])[0].world_size)" "$PLAN")

TOKENIZER_ARGS=()
if [[ -z "$DATA_PATH" && "$CORPUS" == stdlib ]]; then
  DATA_PATH=$OUT/stdlib
  STDLIB=$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  PREP=(python -m megatron_sailor.train.preprocess --input "$STDLIB" --pattern '*.py' --exclude-dir site-packages
        --exclude-dir test --exclude-dir tests --max-files 300 --max-bytes 4000000 --train-bpe 1024 --append-eod --output-prefix "$DATA_PATH")
  if [[ $DRY_RUN == 1 ]]; then printf '%q ' "${PREP[@]}"; echo; else "${PREP[@]}"; fi
  TOKENIZER_ARGS=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_PATH-bpe/vocab.json"
                  --merge-file "$DATA_PATH-bpe/merges.txt")
  # the tokenizer gives the vocabulary size: drop the byte-level model's "--vocab-size 128"
  if [[ -z "$MODEL_NAME" && ${#MODEL_ARGS[@]} -eq 16 ]]; then MODEL_ARGS=("${MODEL_ARGS[@]:0:12}" "${MODEL_ARGS[@]:14}"); fi
elif [[ -z "$DATA_PATH" ]]; then
  DATA_PATH=$OUT/corpus
  PREP=(python -m megatron_sailor.train.preprocess --input examples/gpt/data/sample_corpus.txt --output-prefix "$DATA_PATH")
  if [[ $DRY_RUN == 1 ]]; then printf '%q ' "${PREP[@]}"; echo; else "${PREP[@]}"; fi
fi
# Megatron-LM's arguments: cosine schedule with warm-up, validation loss every 10 iterations on 2 global batches
TRAIN_ARGS=("${MODEL_ARGS[@]}" "${TOKENIZER_ARGS[@]}" --train-iters "$ITERS" --lr 3e-3 --min-lr 3e-4
            --lr-decay-style cosine --lr-warmup-iters 4 --adam-beta2 0.95 --seed 1234 --data-path "$DATA_PATH"
            --eval-interval 10 --eval-iters 2 "${GRAD_SYNC_FLAG[@]}" --metrics-file "$OUT/metrics.jsonl"
            --log-interval 5 "${EXTRA[@]}")
filter_warnings() { grep -v -e '^W[0-9]' -e '^\*\*\*' -e 'OMP_NUM_THREADS' >&2; }

if [[ -n "$NODES_FILE" ]]; then
  # Checks placement (types, zones, node sizes): exits 2 naming the missing resource, launches nothing.
  python -m launch "$PLAN" --nodes-file "$NODES_FILE" --dry-run -- "${TRAIN_ARGS[@]}" > "$OUT/commands.txt"
  if [[ $SLURM == 1 ]]; then
    # shellcheck disable=SC2086
    python -m launch.slurm "$PLAN" --nodes-file "$NODES_FILE" --workdir "$PWD" ${SLURM_ARGS:-} -- "${TRAIN_ARGS[@]}" \
        > "$OUT/job.sbatch"
    bash -n "$OUT/job.sbatch"
    if [[ $DRY_RUN == 1 ]]; then echo "sbatch $OUT/job.sbatch"; cat "$OUT/job.sbatch"; exit 0; fi
    sbatch "$OUT/job.sbatch"
    exit 0
  fi
  if [[ $DRY_RUN == 1 ]]; then cat "$OUT/commands.txt"; exit 0; fi
  echo "launching $NPROC ranks from $NODES_FILE"
  python -m launch "$PLAN" --nodes-file "$NODES_FILE" -- "${TRAIN_ARGS[@]}" 2> >(filter_warnings)
else
  PORT=$(python -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  CMD=(python -m torch.distributed.run --nproc-per-node "$NPROC" --master-addr 127.0.0.1 --master-port "$PORT"
       examples/gpt/pretrain_gpt.py --sailor-plan "$PLAN" "${TRAIN_ARGS[@]}"
       --emulate-cross-zone-latency-s "$ZONE_LATENCY_S" --emulate-cross-zone-gbps "$ZONE_GBPS")
  if [[ $DRY_RUN == 1 ]]; then echo "${CMD[*]}"; exit 0; fi
  echo "training on $NPROC CPU ranks (gloo), grad sync: $GRAD_SYNC, emulated cross-zone link: ${ZONE_LATENCY_S} s + ${ZONE_GBPS} Gbit/s"
  # launch.runner: a worker's "error: ..." line comes last (not torchrun's ChildFailedError) and the status is 2;
  # on a terminal a spinner shows until the first output (imports, rendezvous, process groups take seconds)
  python -m launch.runner --status "starting $NPROC ranks (torch imports, rendezvous, process groups)" \
      --drop-torchrun-warnings -- "${CMD[@]}"
fi
python - "$OUT/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
first, last = rows[0]["loss"], statistics.mean(r["loss"] for r in rows[-5:])
steady = rows[3:] or rows
print(f"loss {first:.3f} -> {last:.3f} (mean of the last 5); median {statistics.median(r['tokens_per_s'] for r in steady):,.0f} "
      f"tokens/s, {statistics.median(r['iteration_time_s'] for r in steady) * 1e3:.1f} ms/iteration")
PY
