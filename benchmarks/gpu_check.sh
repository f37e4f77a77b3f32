#!/usr/bin/env bash
# The GPU check: one GPU, no Docker needed. Host layout (no container), through the image's own
# launcher (python -m tuning.launch -> accelerate launch), fms's FSDP defaults
# (configs/accelerate/fsdp.yaml, FSDP1), torch_dtype bfloat16, a random 1B-class llama
# (python -m tuning.container.tiny_model --size 1b: TinyLlama 1.1B's shape), seeded long demo records
# that fill --seq-len exactly. It measures:
#   1. the all-reduce probe (tuning.container.probe, NCCL, on every visible GPU): algbw, busbw, transport
#      (with one GPU busbw is 0 by nccl-tests' definition; algbw is then the local reduction);
#   2. the trainer's tokens/s (its train_summary.json, warm-up steps left out) and MFU by
#      torchtitan's formula (benchmarks/mfu.py; the peak: --peak-tflops or $PEAK_TFLOPS, else
#      the dense bf16 peak of the GPU's name in benchmarks/gpu_peaks.py; a part not there stops
#      the check before anything runs, asking for --peak-tflops);
#   3. where Docker has the NVIDIA runtime (or an NVIDIA CDI spec) and 2 GPUs are visible, the
#      Compose layouts: `make bench GPUS=2 REPEAT=1 STEPS=5` runs single, per-rank isolated and
#      per-rank shared (and host), each with the probe, whose NCCL log (the launcher sets
#      NCCL_DEBUG=INFO for the probe on GPUs) names the transport each layout really used;
#      elsewhere the check says what it skipped and why;
# and writes $OUT (or --out, default build/gpu-check/) gpu_check.json and gpu_check.md (the
# section), the logs, probe.json, train_summary.json and rank0.jsonl, and puts the section in
# place in docs/benchmarks.md (--no-docs: leave it). Work files (the 2.2 GB model, data, the
# run) go to --work (default build/gpu-check/work). Expected wall time on one H200: ~2-3 min
# (model build ~30 s, probe ~30 s, training ~60-90 s with start-up); each stage has a hard
# timeout (build 120 s, data 60 s, probe 90 s, train 240 s, report 90 s: 10 min at most; the
# Compose layouts, where they run, 20 min more at most).
#
#   benchmarks/gpu_check.sh [--dry-run] [--out DIR] [--work DIR] [--steps 30] [--batch 8]
#                           [--seq-len 2048] [--peak-tflops N] [--python PY] [--no-docs]
#   make gpu-check [DRY_RUN=1] [STEPS=n] [GPU_PYTHON=py]
#
# --dry-run prints every command and checks what needs no GPU (python and torch import, the
# fixture, the launcher's accelerate command for 1 GPU, the trainer accepts the arguments, the 1B
# config on the meta device and its parameter count, the long records fill the sequence, the
# MFU module on a sample run); it runs nothing on a GPU and writes only under --work.
# Without --dry-run and without a GPU it fails: "no GPU visible: ...".
#
# The Python environment (--python, else $GPU_PYTHON, else .venv/bin/python, else python3)
# needs a CUDA build of torch. The project's: the lock's torch 2.13.0, CUDA build:
#   make .venv/.train
#   .venv/bin/pip install -c docker/requirements.lock -c docker/requirements-gpu.lock torch
# (docker/requirements-gpu.lock pins torch===2.13.0, which replaces the +cpu build; it needs the
# registry). A machine without a registry can use a Python that already has CUDA torch,
# transformers, accelerate, peft, tokenizers and pyyaml (--python /path/to/python3); versions
# that differ from the lock are reported, not refused, and recorded in gpu_check.json.
# A section written on another machine (gpu_check.md) is put in place here with
#   .venv/bin/python benchmarks/mfu.py --section gpu_check.md --docs docs/benchmarks.md
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DRY_RUN=0
OUT_DIR=${OUT:-build/gpu-check}
WORK=build/gpu-check/work
STEPS=30
BATCH=8
SEQ_LEN=2048
PEAK=${PEAK_TFLOPS:-}
PY=${GPU_PYTHON:-}
DOCS=docs/benchmarks.md
FIXTURE=configs/accelerate/fsdp.yaml
T_BUILD=120 T_DATA=60 T_PROBE=90 T_TRAIN=240 T_REPORT=90 T_COMPOSE=1200  # s, each stage's limit

die() { echo "gpu-check: $*" >&2; exit "${EXIT:-1}"; }
usage() { sed -n '/^#   benchmarks\/gpu_check.sh/,/^#   make gpu-check/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY_RUN=1 ;;
    --out) OUT_DIR=${2:?--out needs a directory}; shift ;;
    --work) WORK=${2:?--work needs a directory}; shift ;;
    --steps) STEPS=${2:?}; shift ;;
    --batch) BATCH=${2:?}; shift ;;
    --seq-len) SEQ_LEN=${2:?}; shift ;;
    --peak-tflops) PEAK=${2:?}; shift ;;
    --python) PY=${2:?}; shift ;;
    --no-docs) DOCS= ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; EXIT=2 die "unknown argument: $1" ;;
  esac
  shift
done
for v in STEPS BATCH SEQ_LEN; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || EXIT=2 die "$v=${!v} must be a positive integer"
done
[ $((SEQ_LEN % 2)) -eq 0 ] || EXIT=2 die "--seq-len must be even (records of seq_len/2 words)"
[ "$STEPS" -gt 7 ] || EXIT=2 die "--steps must be at least 8 (warm-up steps are left out)"

if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
PY_PATH=$(command -v "$PY") || die "no python at '$PY' (use --python or GPU_PYTHON)"
PYBIN=$(dirname "$PY_PATH")  # its accelerate is the one the launcher runs
case $PY_PATH in /*) ;; *) PY_PATH=$ROOT/$PY_PATH ;; esac
case $PYBIN in /*) ;; *) PYBIN=$ROOT/$PYBIN ;; esac
case $WORK in /*) ;; *) WORK=$ROOT/$WORK ;; esac
case $OUT_DIR in /*) ;; *) OUT_DIR=$ROOT/$OUT_DIR ;; esac

export PATH="$PYBIN:$PATH" PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

free_port() { "$PY_PATH" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- what will run --------------------------------------------------------------------------
MODEL=$WORK/model
DATA=$WORK/data.jsonl
RUN=$WORK/train
PROBE_OUT=$WORK/probe
WORDS=$((SEQ_LEN / 2))
RECORDS=$((STEPS * BATCH))
TRAIN_ARGS=(--model_name_or_path "$MODEL" --training_data_path "$DATA" --output_dir "$RUN"
  --max_steps "$STEPS" --per_device_train_batch_size "$BATCH" --gradient_accumulation_steps 1
  --max_seq_length "$SEQ_LEN" --torch_dtype bfloat16 --learning_rate 1e-4
  --lr_scheduler_type constant --save_strategy no --resume_from_checkpoint false
  --logging_strategy steps --logging_steps 10 --seed 42 --ddp_timeout 300)
PROBE_ARGS="--out $PROBE_OUT --min-bytes 1024 --max-bytes 268435456 --iters 20 --max-seconds-per-size 0.5"
BUILD_CMD=("$PY_PATH" -m tuning.container.tiny_model --size 1b --seed 0 --out "$MODEL")
DATA_CMD=("$PY_PATH" -m tuning.container.demo_data --out "$DATA" --n "$RECORDS" --words "$WORDS" --seed 0)
LAUNCH_ENV=(HARNESS_DEVICE=gpu PET_NNODES=1 PET_NODE_RANK=0 MASTER_ADDR=127.0.0.1
  ACCELERATE_CONFIG="$ROOT/$FIXTURE")

compose_skip() {  # compose_skip NGPU: why the Compose layouts cannot run here (nothing: they can)
  if ! command -v docker >/dev/null; then echo "no docker client on PATH"
  elif ! docker info >/dev/null 2>&1; then echo "the Docker engine does not answer (docker info)"
  elif ! { docker info 2>/dev/null | grep -qi 'runtimes:.*nvidia' ||
           ls /etc/cdi/nvidia*.y*ml /var/run/cdi/nvidia*.y*ml >/dev/null 2>&1; }; then
    echo "Docker has neither the NVIDIA runtime nor an NVIDIA CDI spec (the NVIDIA Container Toolkit)"
  elif [ "$1" -lt 2 ]; then echo "the Compose layouts need 2 GPUs; $1 visible"
  fi
}
COMPOSE_RUNS=$WORK/compose
COMPOSE_CMD=(make bench GPUS=2 REPEAT=1 STEPS=5 RUNS="$COMPOSE_RUNS")
# The host's driver check, first: a driver older than the CUDA image's floor (or MIG) is refused
# with the driver, the CUDA and the fix named (exit 2); no nvidia-smi: nothing to check (exit 0).
DRIVER_CMD=("$PY_PATH" -m tuning.harness gpus --check-driver)

if [ "$DRY_RUN" = 1 ]; then
  NGPU=1; PROBE_PORT=29500; TRAIN_PORT=29501
  GPU_NAME="<nvidia-smi --query-gpu=name>"
  SEEN=0; command -v nvidia-smi >/dev/null && SEEN=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
else
  # --- a GPU, and a CUDA torch to drive it -------------------------------------------------
  command -v nvidia-smi >/dev/null ||
    EXIT=3 die "no GPU visible: nvidia-smi is not on PATH (no NVIDIA driver here); use --dry-run to check the rest"
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  [ "$NGPU" -ge 1 ] || EXIT=3 die "no GPU visible: nvidia-smi -L lists none"
  cuda=$("$PY_PATH" -c 'import torch; print(torch.version.cuda or "")') ||
    EXIT=3 die "torch does not import in $PY_PATH (see this script's header to set up the venv)"
  [ -n "$cuda" ] || EXIT=3 die "torch in $PY_PATH is a CPU build ($("$PY_PATH" -c 'import torch; print(torch.__version__)')).
  Install the lock's CUDA build:  $PYBIN/pip install -c docker/requirements.lock -c docker/requirements-gpu.lock torch
  or point --python at a Python whose torch has CUDA."
  "$PY_PATH" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    EXIT=3 die "no GPU visible: torch (CUDA $cuda) sees none (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset})"
  GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
  if [ -z "$PEAK" ]; then  # MFU needs the peak: known part, or --peak-tflops; ask before running
    "$PY_PATH" benchmarks/gpu_peaks.py "$GPU_NAME" >/dev/null || EXIT=2 die "MFU needs the GPU's peak: rerun with --peak-tflops N (dense bf16 TFLOP/s of '$GPU_NAME')"
  fi
  PROBE_PORT=$(free_port); TRAIN_PORT=$(free_port)
fi
PROBE_CMD=(env "${LAUNCH_ENV[@]}" PET_NPROC_PER_NODE="$NGPU" MASTER_PORT="$PROBE_PORT"
  HARNESS_ENTRY=tuning.container.probe HARNESS_ENTRY_ARGS="$PROBE_ARGS" NCCL_DEBUG=INFO
  "$PY_PATH" -m tuning.launch)
TRAIN_CMD=(env "${LAUNCH_ENV[@]}" PET_NPROC_PER_NODE=1 MASTER_PORT="$TRAIN_PORT"
  "$PY_PATH" -m tuning.launch "${TRAIN_ARGS[@]}")
SHOWN="benchmarks/gpu_check.sh --steps $STEPS --batch $BATCH --seq-len $SEQ_LEN${PEAK:+ --peak-tflops $PEAK}"
JOB=$(printf '{"batch": %d, "seq_len": %d, "words": %d, "records": %d, "steps": %d}' \
  "$BATCH" "$SEQ_LEN" "$WORDS" "$RECORDS" "$STEPS")
REPORT_CMD=("$PY_PATH" benchmarks/mfu.py --model "$MODEL" --run "$RUN" --gpu "$GPU_NAME"
  ${PEAK:+--peak-tflops "$PEAK"} --command "$SHOWN" --job "$JOB" --json "$OUT_DIR/gpu_check.json"
  --markdown "$OUT_DIR/gpu_check.md" ${DOCS:+--docs "$ROOT/$DOCS"})
REPORT_PROBE=(--probe "$PROBE_OUT/probe.json" --probe-log "$OUT_DIR/probe.log")

show() { printf '+'; printf ' %q' "$@"; printf '\n'; }

if [ "$DRY_RUN" = 1 ]; then
  echo "gpu-check: dry run; the commands (stage, timeout):"
  echo "# build (${T_BUILD} s)"; show "${BUILD_CMD[@]}"
  echo "# data (${T_DATA} s)"; show "${DATA_CMD[@]}"
  echo "# probe (${T_PROBE} s; PET_NPROC_PER_NODE = the visible GPUs, 1 shown)"
  show "${PROBE_CMD[@]}"
  echo "# train (${T_TRAIN} s)"; show "${TRAIN_CMD[@]}"
  echo "# compose layouts (${T_COMPOSE} s): single, per-rank isolated, per-rank shared (and host)"
  echo "#   on 2 GPUs, each with the probe: NCCL's transport per layout"
  show "${COMPOSE_CMD[@]}"
  skip=$(compose_skip "$SEEN")
  echo "gpu-check: compose layouts here: ${skip:+skipped: }${skip:-would run}"
  echo "# report (${T_REPORT} s)"
  show "${REPORT_CMD[@]}" "${REPORT_PROBE[@]}" --layouts "$COMPOSE_RUNS/latest/report.json"
  echo "# driver check (first)"; show "${DRIVER_CMD[@]}"
  echo "gpu-check: checks that need no GPU:"
  mkdir -p "$WORK/dry"
  GC_SEQ=$SEQ_LEN GC_WORDS=$WORDS GC_FIXTURE="$ROOT/$FIXTURE" GC_DRY="$WORK/dry" \
  GC_PROBE_ARGS="$PROBE_ARGS" GC_PYBIN="$PYBIN" GC_SAMPLE_GPU="NVIDIA H100 80GB HBM3" \
    timeout -k 10 300 "$PY_PATH" benchmarks/gpu_check_dry.py "${TRAIN_ARGS[@]}"
  echo "gpu-check: dry run ok (nothing ran on a GPU; no docs written)"
  exit 0
fi

# --- the real run ----------------------------------------------------------------------------
mkdir -p "$OUT_DIR" "$WORK"
FAILED=()
stage() {  # stage NAME TIMEOUT LOG CMD...
  local name=$1 limit=$2 log=$3 t0=$SECONDS rc=0
  shift 3
  echo "gpu-check: [$name] (timeout ${limit} s)"; show "$@"
  timeout -k 10 "$limit" "$@" >"$log" 2>&1 || rc=$?
  echo "gpu-check: [$name] rc=$rc in $((SECONDS - t0)) s (log: $log)"
  if [ "$rc" != 0 ]; then
    [ "$rc" = 124 ] && echo "gpu-check: [$name] ran past its ${limit} s timeout"
    tail -n 25 "$log" | sed 's/^/    /'
    FAILED+=("$name")
  fi
  return "$rc"
}

lock_torch=$(sed -n 's/^torch===*\([0-9.]*\).*/\1/p' docker/requirements-gpu.lock | head -1)
have=$("$PY_PATH" -c 'import torch, transformers, accelerate as a; print(torch.__version__, transformers.__version__, a.__version__)')
echo "gpu-check: $NGPU GPU(s): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); torch/transformers/accelerate $have"
[[ $have == "$lock_torch"* ]] || echo "gpu-check: note: torch ${have%% *} is not the lock's $lock_torch (recorded, not refused)"

T0=$SECONDS
rm -rf "$RUN" "$PROBE_OUT" "$COMPOSE_RUNS"
stage driver 60 "$OUT_DIR/driver.log" "${DRIVER_CMD[@]}" || die "the host's driver check refused (see $OUT_DIR/driver.log)"
stage build "$T_BUILD" "$OUT_DIR/build.log" "${BUILD_CMD[@]}" || die "the 1B model did not build"
stage data "$T_DATA" "$WORK/data.log" "${DATA_CMD[@]}" || die "the data was not written"
PROBE_OK=1
stage probe "$T_PROBE" "$OUT_DIR/probe.log" "${PROBE_CMD[@]}" || PROBE_OK=0
grep '^probe:' "$OUT_DIR/probe.log" | tail -n 4 | sed 's/^/    /' || true
stage train "$T_TRAIN" "$OUT_DIR/train.log" "${TRAIN_CMD[@]}" ||
  { cp "$RUN/metrics/rank0.jsonl" "$OUT_DIR/" 2>/dev/null || true; die "training failed: ${FAILED[*]}"; }
if [ "$PROBE_OK" = 0 ] || [ ! -f "$PROBE_OUT/probe.json" ]; then  # report without the probe
  REPORT_PROBE=()
fi
SKIP=$(compose_skip "$NGPU")
if [ -z "$SKIP" ]; then
  stage compose "$T_COMPOSE" "$OUT_DIR/compose.log" "${COMPOSE_CMD[@]}" || true
  BENCH_REPORT=$COMPOSE_RUNS/latest/report.json
  if [ -f "$BENCH_REPORT" ]; then
    cp "$BENCH_REPORT" "$OUT_DIR/compose-report.json"
    REPORT_PROBE+=(--layouts "$BENCH_REPORT")
  else
    REPORT_PROBE+=(--layouts-skipped "the bench wrote no report (see compose.log)")
  fi
else
  echo "gpu-check: [compose] skipped: $SKIP"
  REPORT_PROBE+=(--layouts-skipped "$SKIP")
fi
stage report "$T_REPORT" "$WORK/report.log" "${REPORT_CMD[@]}" "${REPORT_PROBE[@]}" || true
cat "$WORK/report.log"
cp "$RUN/train_summary.json" "$RUN/metrics/rank0.jsonl" "$OUT_DIR/" 2>/dev/null || true
[ -f "$PROBE_OUT/probe.json" ] && cp "$PROBE_OUT/probe.json" "$OUT_DIR/"
echo "gpu-check: done in $((SECONDS - T0)) s; results in $OUT_DIR${DOCS:+, section in $DOCS}"
[ ${#FAILED[@]} -eq 0 ] || die "failed stages: ${FAILED[*]}"
