# The interface users type. Every target is a thin call into `python -m tuning.harness`.
# make help lists targets and variables.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
LOCK   := docker/requirements.lock
RUNS   ?= runs

# Variables map to flags only when set, so the harness's own defaults stay in one place.
flag = $(if $($(1)),--$(2) $($(1)))
# A switch (RESUME, DRY_RUN, REHEARSE, REBUILD) is on unless empty, 0, false, no or off.
OFF := 0 false False FALSE no No NO off Off OFF
switch = $(if $(filter-out $(OFF),$(strip $($(1)))),--$(2))
UP_FLAGS = $(call flag,LAYOUT,layout) $(call flag,GPUS,gpus) $(call flag,NPROC,nproc) \
  $(call flag,CUDA,cuda) \
  $(call flag,MODEL,model) $(call flag,DATA,data) $(call flag,STEPS,steps) \
  $(call flag,CONFIG,config) $(call flag,SEED,seed) $(call flag,TIMEOUT,timeout) \
  $(call flag,NETWORK,network) $(call flag,MAX_RESTARTS,max-restarts) \
  $(call flag,JOB,job) $(call flag,IMAGE,image) $(call flag,RUN_ID,run-id) --runs $(RUNS) \
  $(call flag,TRAINER,trainer) $(call flag,ENTRY,entry) $(call switch,RESUME,resume) \
  $(call flag,RESUME_FROM,resume-from) $(call flag,MEMORY,memory) $(call flag,PIDS,pids)

BENCH_FLAGS = $(UP_FLAGS) $(call flag,REPEAT,repeat) $(call flag,BUDGET,budget) \
  $(call switch,DRY_RUN,dry-run)
FAULT_FLAGS = $(UP_FLAGS) $(call flag,FAULT,fault) $(call flag,RANK,rank) \
  $(call flag,AT_STEP,at-step) $(call flag,RDZV_TIMEOUT,rdzv-timeout) $(call flag,LATE,late)
KUBE_FLAGS = $(call flag,GPUS,gpus) $(call flag,NODES,nodes) $(call flag,IMAGE,image) \
  $(call flag,CUDA,cuda) \
  $(call flag,NAME,name) $(call flag,STEPS,steps) $(call flag,NPROC,nproc) --runs $(RUNS) \
  $(call switch,REHEARSE,rehearse) $(call flag,KIND,kind) $(call flag,MAX_RESTARTS,max-restarts) \
  $(call flag,RESTART_POLICY,restart-policy) $(call flag,TIMEOUT,timeout) \
  $(call flag,RUN_ID,run-id) $(call flag,KILL,kill-rank) $(call flag,AT_STEP,kill-at-step) \
  $(call flag,RDZV_TIMEOUT,rdzv-timeout)

.PHONY: help up down ps logs stacks image lock bench fault kube test test-gpu-image lint fmt clean fms-lock gpu-check
.DEFAULT_GOAL := help

help: ## list targets and variables
	@echo "Targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  make %-8s %s\n", $$1, $$2}'
	@echo "Variables (make up):"
	@echo "  GPUS=N          GPUs to use: N free visible ones (default: all visible; 0 = CPU ranks on gloo)"
	@echo "  CUDA=12.8       the CUDA 12 GPU image (drivers R525-R570); default CUDA 13.0 (R580+)"
	@echo "  LAYOUT=name     single (default) | per-rank | host"
	@echo "  NPROC=n         CPU ranks when there is no GPU (default 2)"
	@echo "  MODEL=dir       local Hugging Face model directory (default: the tiny model)"
	@echo "  DATA=file       JSON Lines training data (default: the demo data)"
	@echo "  STEPS=k         training steps (max_steps)"
	@echo "  CONFIG=file     accelerate config (default: configs/accelerate/fsdp.yaml, fsdp-cpu.yaml on CPU)"
	@echo "  SEED=s          seed for init, data order and dropout"
	@echo "  TIMEOUT=s       collective timeout (ddp_timeout)"
	@echo "  NETWORK=mode    per-rank: isolated (default, a pod per rank) | shared (rank 0's namespaces)"
	@echo "  RESUME=1        resume from runs/latest's newest checkpoint (checked and named first)"
	@echo "  RESUME_FROM=id  resume from that run's newest checkpoint"
	@echo "  MEMORY=8g PIDS=4096  per-container memory and process limits (default: none)"
	@echo "  MAX_RESTARTS=n  restart the group up to n times"
	@echo "  STALL=s         up: dump every rank's stack after s s without progress (default max(60, 10 x step); 0: off)"
	@echo "  DRY_RUN=1       print the Compose file and launch commands, run nothing"
	@echo "  RUNS=dir        where runs are recorded (default runs/)"
	@echo "  TRAINER=fms     fms-hf-tuning 3.2.2 itself, in its own image (make image TRAINER=fms)"
	@echo "  IMAGE=img ENTRY=module  a trainer of your own image (README: what it needs)"
	@echo "Variables (bench, fault, kube):"
	@echo "  REPEAT=r        bench: rounds over the layouts (default 5); REPEAT=auto: until every"
	@echo "                  goal is MET or MISSED, not UNRESOLVED (at least 5 rounds)"
	@echo "  BUDGET=10m      bench REPEAT=auto: the time budget (s, m or h; default 15m)"
	@echo "  FAULT=kind      fault: kill save-kill disk-full late-master term preempt crash pause slow delay loss partition oom no-show | all"
	@echo "  RANK=i AT_STEP=k  fault: the rank to hit and the step to hit it at"
	@echo "  RDZV_TIMEOUT=s  fault: how long ranks wait for a missing peer at start"
	@echo "  LATE=s          fault late-master: rank 0's node starts s after the others (default 10)"
	@echo "  NODES=m NAME=job  kube: nodes (pods) and the PyTorchJob's name"
	@echo "  REHEARSE=1      kube: also run the job's pods here, as Compose services"
	@echo "  KIND=trainjob   kube: a Trainer v2 TrainJob + TrainingRuntime (default pytorchjob)"
	@echo "  RESTART_POLICY= kube: PyTorchJob Never|OnFailure|ExitCode (MAX_RESTARTS: backoffLimit)"
	@echo "  KILL=i AT_STEP=k kube REHEARSE=1: kill rank i's pod at step k; the operator's rules act"

# Every environment installs at the lock's exact versions (make lock re-makes it).
$(VENV)/.harness: pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c $(LOCK) -e ".[kube]"
	touch $@

$(VENV)/.train: pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c $(LOCK) -e ".[train,bench,test,kube]"
	touch $@ $(VENV)/.harness

# LAYOUT=host trains here; a dry run with CONFIG loads it with accelerate here (no container).
HARNESS_DEPS = $(if $(filter host,$(LAYOUT))$(and $(call switch,DRY_RUN,x),$(CONFIG)),$(VENV)/.train,$(VENV)/.harness)

up: $(HARNESS_DEPS) ## train: build what is missing, run the layout, follow it, clean up
	$(PY) -m tuning.harness up $(UP_FLAGS) $(call flag,STALL,stall) $(call switch,DRY_RUN,dry-run)

stacks: $(VENV)/.harness ## every rank's Python stack of a running run (RUN_ID=id; default the latest)
	$(PY) -m tuning.harness stacks --runs $(RUNS) $(call flag,RUN_ID,run-id)

down: $(VENV)/.harness ## remove what the harness labelled, saying what (RUN_ID=x: that run only)
	$(PY) -m tuning.harness down --runs $(RUNS) $(call flag,RUN_ID,run-id)

ps: $(VENV)/.harness ## list the harness's containers and networks
	$(PY) -m tuning.harness ps

logs: $(VENV)/.harness ## follow the latest run's logs (or print them once it ended)
	$(PY) -m tuning.harness logs --runs $(RUNS) $(call flag,RUN,run-id)

image: $(VENV)/.harness ## build the image if it is missing: [DEVICE=cpu|gpu] [CUDA=12.8] (REBUILD=1, DRY_RUN=1)
	$(PY) -m tuning.harness image $(call flag,DEVICE,device) $(call flag,TRAINER,trainer) \
	  $(call flag,CUDA,cuda) $(call switch,REBUILD,rebuild) $(call switch,DRY_RUN,dry-run)

lock: ## re-make docker/requirements*.lock from pyproject.toml (UPGRADE=1: newest allowed)
	UPGRADE=$(UPGRADE) bash docker/lock.sh

bench: $(VENV)/.train ## the layouts side by side: host, single, per-rank isolated and shared
	$(PY) -m tuning.harness bench $(BENCH_FLAGS)

fault: $(VENV)/.harness ## reproduce a cluster failure: FAULT=kind|all [RANK=i] [AT_STEP=k]
	$(PY) -m tuning.harness fault $(FAULT_FLAGS)

kube: $(VENV)/.harness ## render the job as a PyTorchJob or TrainJob: [KIND=trainjob] [GPUS=N] [NODES=m]
	$(PY) -m tuning.harness kube $(KUBE_FLAGS)

fms-lock: $(VENV)/.harness ## regenerate docker/fms.lock: fms-hf-tuning 3.2.2, every package pinned
	$(PY) docker/fms_lock.py > docker/fms.lock.new && mv docker/fms.lock.new docker/fms.lock

test: $(VENV)/.train ## the whole suite, container tests included
	$(PY) -m pytest $(PYTEST_ARGS)

test-gpu-image: $(VENV)/.train ## build the GPU image here (~7 GB) and train CPU ranks in it
	$(PY) -m pytest -m gpu_image tests/test_gpu_image.py $(PYTEST_ARGS)

# No venv prerequisite: the GPU machine may have no registry; the script finds its Python
# (GPU_PYTHON, else .venv/bin/python, else python3) and says what is missing.
gpu-check: ## 1 GPU, FSDP, bf16, 1B llama: NCCL probe, tokens/s, MFU -> docs/benchmarks.md (DRY_RUN=1)
	bash benchmarks/gpu_check.sh $(call switch,DRY_RUN,dry-run) $(call flag,STEPS,steps) \
	  $(call flag,GPU_PYTHON,python)

lint: $(VENV)/.train ## ruff format --check and ruff check
	$(VENV)/bin/ruff format --check . && $(VENV)/bin/ruff check .

fmt: $(VENV)/.train ## format and fix with ruff
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean: ## remove the virtual environment and build outputs (keeps runs/)
	rm -rf $(VENV) build
