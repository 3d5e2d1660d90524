#!/usr/bin/env bash
# VLA demonstration-count sweep on one GPU machine: build BabyAI bot demonstrations once (the largest count,
# in WORKERS processes), behaviour-clone the preset on the first N of them for each N in COUNTS (runs side
# by side on the GPU), evaluate every final checkpoint greedily on two sets of held-out layouts and with sampled
# actions on one, and write
# $OUT/summary.json, $OUT/summary.md and $OUT/sweep.log. Everything else (datasets, run folders, logs)
# goes to $WORK, so $OUT stays a handful of files.
#
#   bash benchmarks/vla_gpu_sweep.sh                                   # GoToLocal, 1k/5k/20k demos, cuda
#   LEVEL=PickupLoc PRESET=pickuploc COUNTS="5000 20000" bash benchmarks/vla_gpu_sweep.sh
#   DEVICE=cpu COUNTS="20 50" STEPS=5 BATCH=16 EVAL_EPISODES=10 WORKERS=2 bash benchmarks/vla_gpu_sweep.sh
#
# Sized for a 16-core H200 machine in about 8 minutes with the defaults (not yet run there; the single-threaded
# Minari/HDF5 write of the largest count is the least known part: ≈ 33 ms per episode on a loaded 2-core
# machine, so maybe 2–3 min for 20000 on an idle core — COUNTS="1000 5000 10000" if time is short). Needs python with torch and the
# project's dependencies; PYTHONPATH gets ./src first. The BabyAI path imports minigrid (3.2), pygame-ce,
# gymnasium (1.4), farama-notifications and minari (0.5) — images without them need those wheels.
# Any failed step stops the script with a non-zero exit status and the failing log's tail.
set -euo pipefail

LEVEL=${LEVEL:-GoToLocal}              # BabyAI level (short name or BabyAI-* id)
PRESET=${PRESET:-gotolocal}            # seqrl train vla --config preset
COUNTS=${COUNTS:-"1000 5000 20000"}    # demonstration counts, one training run each (first N of one build)
STEPS=${STEPS:-4000}                   # gradient steps per run
BATCH=${BATCH:-512}                    # windows of K steps per gradient step
LR=${LR:-2e-3}                         # peak learning rate (the preset's 1e-3 is for batch 64)
WARMUP=${WARMUP:-200}                  # warm-up steps
WORKERS=${WORKERS:-16}                 # bot processes for the demonstrations
PARALLEL=${PARALLEL:-3}                # training runs at once on the device
DEVICE=${DEVICE:-cuda}                 # run.device: cuda, cuda:N, cpu, auto
BF16=${BF16:-auto}                     # run.bf16: auto (on where the device runs bf16 fast), true, false
EVAL_EPISODES=${EVAL_EPISODES:-500}    # held-out episodes per evaluation
TEMPERATURE=${TEMPERATURE:-1}          # sampling temperature of the extra sampled evaluation
DATA_SEED=${DATA_SEED:-0}              # demonstrations seed
SEEDS=${SEEDS:-0}                      # run seeds (weights, batch order), one run per count and seed
TRAIN_ARGS=${TRAIN_ARGS:-}             # extra overrides for seqrl train vla, e.g. "--model.fusion=cross_attention"
THREADS=${THREADS:-2}                  # torch CPU threads per training run
PYTHON=${PYTHON:-python3}
OUT=${OUT:-./out}
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/vla_sweep.XXXXXX")}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT" "$WORK/logs"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/sweep.log"
: >"$LOG"

say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
die() { say "FAILED: $*"; exit 1; }
seqrl() { "$PYTHON" -m seqrl "$@"; }
trap 'rc=$?; [ $rc -eq 0 ] || say "FAILED (exit $rc); datasets, runs and logs are in $WORK"' EXIT

say "vla_gpu_sweep: LEVEL=$LEVEL PRESET=$PRESET COUNTS=($COUNTS) STEPS=$STEPS BATCH=$BATCH LR=$LR DEVICE=$DEVICE" \
    "BF16=$BF16 WORKERS=$WORKERS PARALLEL=$PARALLEL EVAL_EPISODES=$EVAL_EPISODES TEMPERATURE=$TEMPERATURE SEEDS=($SEEDS) WORK=$WORK"

# --- preflight: fail in seconds, not after the demonstrations
for n in $COUNTS $STEPS $BATCH $WORKERS $PARALLEL $EVAL_EPISODES $THREADS; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "COUNTS, STEPS, BATCH, WORKERS, PARALLEL, EVAL_EPISODES and THREADS must be positive integers (got '$n')"
done
"$PYTHON" - "$DEVICE" "$BF16" >>"$LOG" 2>&1 <<'PY' || die "preflight (see $LOG): missing packages or device"
import sys
missing = []
for mod in ("torch", "minigrid", "gymnasium", "minari", "h5py", "matplotlib", "seqrl"):
    try:
        __import__(mod)
    except Exception as e:  # noqa: BLE001
        missing.append(f"{mod} ({type(e).__name__}: {e})")
if missing:
    sys.exit("cannot import: " + "; ".join(missing))
import torch
from seqrl.utils.dist import resolve_bf16, resolve_device
dev = resolve_device(sys.argv[1])
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device {dev}"
      f"{' (' + torch.cuda.get_device_name(dev) + ')' if dev.type == 'cuda' else ''}, bf16 {resolve_bf16(sys.argv[2] if sys.argv[2] == 'auto' else sys.argv[2] == 'true', dev)}")
PY
tail -1 "$LOG"

# --- demonstrations: one build of the largest count; smaller counts are its first N episodes
MAX=$(printf '%s\n' $COUNTS | sort -n | tail -1)
say "building $MAX $LEVEL demonstrations with $WORKERS workers"
seqrl data babyai "$LEVEL" --episodes "$MAX" --seed "$DATA_SEED" --workers "$WORKERS" --out "$WORK/datasets" --force \
  >"$WORK/data.json" 2>"$WORK/logs/data.log" || { tail -20 "$WORK/logs/data.log" | tee -a "$LOG"; die "seqrl data babyai"; }
DATASET=$("$PYTHON" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["path"])' "$WORK/data.json")
say "dataset: $(tail -1 "$WORK/data.json")"

# --- training runs, PARALLEL at a time; each ends with its own held-out evaluation (eval seed 0)
declare -a NAMES=() PIDS=()
failed=0
wait_one() {  # wait for the oldest running job; record a failure
  local pid=${PIDS[0]} name=${NAMES[0]}
  PIDS=("${PIDS[@]:1}"); NAMES=("${NAMES[@]:1}")
  if wait "$pid"; then say "done: $name"; else
    say "$name failed; last lines of $WORK/logs/$name.log:"; tail -25 "$WORK/logs/$name.log" | tee -a "$LOG"; failed=1
  fi
}
RUNS=()
for seed in $SEEDS; do
  for n in $COUNTS; do
    name="vla_${LEVEL}_n${n}_s${seed}"
    RUNS+=("$name")
    while [ ${#PIDS[@]} -ge "$PARALLEL" ]; do wait_one; done
    say "train $name"
    # shellcheck disable=SC2086  # TRAIN_ARGS is a list of overrides
    seqrl train vla --config "$PRESET" --data.dataset="$DATASET" --data.max_episodes="$n" --steps="$STEPS" \
      --batch_size="$BATCH" --optim.lr="$LR" --optim.warmup_steps="$WARMUP" --run.device="$DEVICE" \
      --run.bf16="$BF16" --run.threads="$THREADS" --run.out_dir="$WORK/runs" --run.name="$name" --run.seed="$seed" \
      --run.save_every=0 --run.keep_last=1 --run.log_every=50 --run.progress=false --eval.every=0 \
      --eval.episodes="$EVAL_EPISODES" --eval.seed=0 $TRAIN_ARGS >"$WORK/logs/$name.log" 2>&1 &
    PIDS+=($!); NAMES+=("$name")
  done
done
while [ ${#PIDS[@]} -gt 0 ]; do wait_one; done
[ "$failed" -eq 0 ] || die "a training run failed"

# --- every final checkpoint again through seqrl eval vla: greedy on other held-out layouts (eval seed 1), and
# sampled at TEMPERATURE on the training run's layouts (eval seed 0; a greedy BC policy can loop forever)
# (PARALLEL at a time, like the training runs)
for name in "${RUNS[@]}"; do
  ckpt=$(ls -d "$WORK/runs/$name"/checkpoint-* | sort -t- -k2 -n | tail -1)
  for spec in "1 0 greedy_seed1" "0 $TEMPERATURE sampled_seed0"; do
    set -- $spec
    while [ ${#PIDS[@]} -ge "$PARALLEL" ]; do wait_one; done
    say "eval $name ($ckpt, seed $1, temperature $2)"
    seqrl eval vla --checkpoint "$ckpt" --episodes "$EVAL_EPISODES" --seed "$1" --temperature "$2" --device "$DEVICE" \
      --threads "$THREADS" --out "$WORK/runs/$name/eval_$3.json" >"$WORK/logs/$name.eval_$3.log" 2>&1 &
    PIDS+=($!); NAMES+=("$name.eval_$3")
  done
done
while [ ${#PIDS[@]} -gt 0 ]; do wait_one; done
[ "$failed" -eq 0 ] || die "an evaluation failed"

# --- summary
"$PYTHON" - "$WORK" "$OUT" "$LEVEL" "$PRESET" "$STEPS" "$BATCH" "$DEVICE" "$BF16" "$TRAIN_ARGS" "${RUNS[@]}" >>"$LOG" 2>&1 <<'PY' \
  || die "summary (see $LOG)"
import json, re, shutil, statistics, sys
from pathlib import Path

work, out, level, preset, steps, batch, device, bf16, extra, *runs = sys.argv[1:]
work, out = Path(work), Path(out)
data = json.loads((work / "data.json").read_text().strip().splitlines()[-1])
rows = []
for name in runs:
    recs = [json.loads(line) for line in (work / "runs" / name / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = {}
    for r in recs:
        last.update(r)
    first = recs[0]
    e1 = json.loads((work / "runs" / name / "eval_greedy_seed1.json").read_text())["metrics"]
    es = json.loads((work / "runs" / name / "eval_sampled_seed0.json").read_text())
    n, seed = re.search(r"_n(\d+)_s(\d+)$", name).groups()
    for key in ("eval/success_rate", "loss/action"):
        if key not in last:
            sys.exit(f"{name}: no {key} in its metrics.jsonl")
    rows.append({"run": name, "demos": int(n), "seed": int(seed), "success_eval0": last["eval/success_rate"],
                 "success_eval1": e1["eval/success_rate"],
                 "success_sampled_eval0": es["metrics"]["eval/success_rate"], "temperature": es["temperature"], "episode_length_eval0": last["eval/episode_length"],
                 "random_success": first.get("eval/random_success_rate"), "final_loss": last["loss/action"],
                 "batch_accuracy": last.get("stats/action_accuracy"), "samples_per_s": last.get("perf/samples_per_s"),
                 "eval_s": last.get("perf/eval_s"), "device": first.get("run/device"), "bf16": first.get("run/bf16"),
                 "parameters": first.get("model/parameters"), "data_steps": first.get("data/steps")})
summary = {"level": level, "preset": preset, "steps": int(steps), "batch_size": int(batch), "device": device,
           "bf16": bf16, "train_args": extra, "dataset": data, "runs": rows}
by_n = {}
for r in rows:
    by_n.setdefault(r["demos"], []).append(r)
summary["success_by_demos"] = {
    str(n): {"greedy_mean": statistics.mean((r["success_eval0"] + r["success_eval1"]) / 2 for r in v),
             "sampled_mean": statistics.mean(r["success_sampled_eval0"] for r in v), "runs": len(v)}
    for n, v in sorted(by_n.items())}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
md = [f"# VLA sweep: {level}, preset {preset}", "",
      f"{steps} steps x {batch} windows, device {device}, bf16 {bf16}, extra overrides `{extra or '-'}`; "
      f"demonstrations: {data['episodes']} built ({data['steps']} steps, {data['missions']} missions, "
      f"{data['bot_failures']} bot failures skipped, {data['demos_per_s']} demos/s with {data.get('workers')} workers).", "",
      "| demos | seed | greedy success (eval seed 0) | greedy (eval seed 1) | sampled T (eval seed 0) | random | mean length (greedy, seed 0) | final loss | batch acc | samples/s |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
fmt = lambda x, f="{:.3f}": "-" if x is None else f.format(x)  # noqa: E731
for r in rows:
    md.append(f"| {r['demos']} | {r['seed']} | {fmt(r['success_eval0'])} | {fmt(r['success_eval1'])} | "
              f"{fmt(r['success_sampled_eval0'])} (T {r['temperature']:g}) | "
              f"{fmt(r['random_success'])} | {fmt(r['episode_length_eval0'], '{:.1f}')} | {fmt(r['final_loss'])} | "
              f"{fmt(r['batch_accuracy'])} | {fmt(r['samples_per_s'], '{:.0f}')} |")
(out / "summary.md").write_text("\n".join(md) + "\n")
biggest = max(rows, key=lambda r: (r["demos"], -r["seed"]))["run"]
strip = work / "runs" / biggest / "plots" / "episode.png"
if strip.is_file():
    shutil.copy(strip, out / "episode.png")
print("\n".join(md))
PY
cat "$OUT/summary.md"
say "wrote $OUT/summary.json, $OUT/summary.md ($WORK holds datasets, runs and logs)"
