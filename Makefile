# The interface users type. Every target is a thin call into `python -m tuning.harness`.
# make help lists targets and variables.

# Only what is typed on make's command line counts (it overrides these): an environment
# variable of the same name (RUNS, VENV, PYTHON) never does.
PYTHON := python3
VENV   := .venv
PY     := $(VENV)/bin/python
LOCK   := docker/requirements.lock
RUNS   := runs

# The variables: flags/flag_table.py declares each once (what it means, which commands honour
# it, its group in make help and --help), in the order of VALUES and SWITCHES here. A variable
# reaches the harness only when typed on make's command line ($(origin)), so an environment
# variable that shares a name (DATA, MODEL, ...) never becomes a flag; every target passes every
# typed one, and a command refuses by name, with the reason, one it cannot honour.
VALUES := JOB MODEL DATA CONFIG SEED STEPS TIMEOUT TRAINER IMAGE ENTRY ARGS SRC GPUS NPROC \
  CUDA THREADS LAYOUT NETWORK MEMORY PIDS MAX_RESTARTS RESUME_FROM SAVE_EVERY \
  GPU_HOURS_PER_FAILURE RUN_ID GRACE STALL HANG REPEAT BUDGET LAYOUTS FAULT RANK AT_STEP \
  RDZV_TIMEOUT LATE KILL MTBF DURATION KINDS FAULT_SEED PICK FROM NODES NAME KIND \
  RESTART_POLICY OUTPUT_CLAIM NAMESPACE OUT KUBE_UID DEVICE
# A switch (RESUME, DRY_RUN, REHEARSE, ...) is on unless empty, 0, false, no or off.
SWITCHES := RESUME SAVE_ADVISED DRY_RUN ALL RUN REHEARSE REBUILD
OFF := 0 false False FALSE no No NO off Off OFF
typed = $(filter command line,$(origin $(1)))
lower = $(subst Z,z,$(subst Y,y,$(subst X,x,$(subst W,w,$(subst V,v,$(subst U,u,$(subst T,t,$(subst S,s,$(subst R,r,$(subst Q,q,$(subst P,p,$(subst O,o,$(subst N,n,$(subst M,m,$(subst L,l,$(subst K,k,$(subst J,j,$(subst I,i,$(subst H,h,$(subst G,g,$(subst F,f,$(subst E,e,$(subst D,d,$(subst C,c,$(subst B,b,$(subst A,a,$(1)))))))))))))))))))))))))))
option = --$(subst _,-,$(call lower,$(1)))
quote = '$(subst ','\'',$(1))'
on = $(filter-out $(OFF),$(strip $($(1))))
TYPED = $(strip $(foreach v,$(VALUES),$(if $(call typed,$(v)),$(v))))
SWITCHED = $(strip $(foreach v,$(SWITCHES),$(if $(call typed,$(v)),$(if $(call on,$(v)),$(v)))))
# $(value ...): a value arrives as typed, a $ in it too (make would expand ARGS='a$HOME' to aOME)
FLAGS = --runs $(call quote,$(value RUNS)) \
  $(foreach v,$(TYPED),$(call option,$(v)) $(call quote,$(value $(v)))) \
  $(foreach v,$(SWITCHED),$(call option,$(v)))

# Nothing typed is ignored: a variable on make's command line that no target knows, or one set
# in the environment that a target typed here takes (`DRY_RUN=1 make up` would otherwise train
# for real), stops make with one line naming the fix (flags/flag_table.py's refusal: the nearest
# known name).
OWN := RUNS VENV PYTHON PYTEST_ARGS UPGRADE GPU_PYTHON
CMDLINE := $(foreach v,$(.VARIABLES),$(if $(filter command line,$(origin $(v))),$(v)))
UNKNOWN := $(filter-out $(VALUES) $(SWITCHES) $(OWN),$(CMDLINE))
FROM_ENV := $(foreach v,$(VALUES) $(SWITCHES),$(if $(filter environment,$(origin $(v))),$(v)))
REFUSAL := $(if $(strip $(UNKNOWN) $(FROM_ENV)),$(shell $(PYTHON) tuning/harness/flags/flag_table.py \
  --refusal '$(UNKNOWN)' '$(FROM_ENV)' '$(or $(MAKECMDGOALS),help)'))
ifneq ($(REFUSAL),)
$(error $(REFUSAL))
endif

.PHONY: help up down ps logs stacks image lock bench fault soak pool repro kube test test-gpu-image lint fmt clean fms-lock gpu-check
.DEFAULT_GOAL := help

help: ## list targets and variables
	@echo "Targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | awk -F'\t' '{printf "  make %-8s %s\n", $$1, $$2}'
	@$(PYTHON) tuning/harness/flags/flag_table.py

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
HARNESS_DEPS = $(if $(filter host,$(LAYOUT))$(and $(call on,DRY_RUN),$(CONFIG)),$(VENV)/.train,$(VENV)/.harness)

up: $(HARNESS_DEPS) ## train: build what is missing, run the layout, follow it, clean up
	$(PY) -m tuning.harness up $(FLAGS)

stacks: $(VENV)/.harness ## every rank's Python stack of a running run (RUN_ID=id; default the latest)
	$(PY) -m tuning.harness stacks $(FLAGS)

down: $(VENV)/.harness ## remove this checkout's runs (RUNS), saying what (RUN_ID=x: that run; ALL=1: every folder's)
	$(PY) -m tuning.harness down $(FLAGS)

ps: $(VENV)/.harness ## list this checkout's running containers and networks (ALL=1: every folder's)
	$(PY) -m tuning.harness ps $(FLAGS)

logs: $(VENV)/.harness ## follow the latest run's logs (or print them once it ended)
	$(PY) -m tuning.harness logs $(FLAGS)

image: $(VENV)/.harness ## build the image if it is missing: [DEVICE=cpu|gpu] [CUDA=12.8] (REBUILD=1, DRY_RUN=1)
	$(PY) -m tuning.harness image $(FLAGS)

lock: ## re-make docker/requirements*.lock from pyproject.toml (UPGRADE=1: newest allowed)
	UPGRADE=$(UPGRADE) bash docker/lock.sh

bench: $(VENV)/.train ## the layouts side by side: host, single, per-rank isolated and shared
	$(PY) -m tuning.harness bench $(FLAGS)

fault: $(VENV)/.harness ## reproduce a cluster failure: FAULT=kind|all [RANK=i] [AT_STEP=k]
	$(PY) -m tuning.harness fault $(FLAGS)

soak: $(VENV)/.train ## train for DURATION under seeded failures: MTBF=3m DURATION=20m [KINDS=kill,oom] [FAULT_SEED=n] [SAVE_EVERY=n]
	$(PY) -m tuning.harness soak $(FLAGS)

pool: $(VENV)/.harness ## the scored pool: fault runs of each scored kind, each verdict against what was injected (PICK=1,9)
	$(PY) -m tuning.harness pool $(FLAGS)

repro: $(VENV)/.harness ## a failed cluster job's logs -> the culprit and the same failure here: FROM=dir [RUN=1]
	$(PY) -m tuning.harness repro $(FLAGS)

kube: $(VENV)/.harness ## render the job as a PyTorchJob or TrainJob: [KIND=trainjob] [GPUS=N] [NODES=m]
	$(PY) -m tuning.harness kube $(FLAGS)

fms-lock: $(VENV)/.harness ## regenerate docker/fms.lock: fms-hf-tuning 3.2.2, every package pinned
	$(PY) docker/fms_lock.py > docker/fms.lock.new && mv docker/fms.lock.new docker/fms.lock

test: $(VENV)/.train ## the whole suite, container tests included
	$(PY) -m pytest $(PYTEST_ARGS)

test-gpu-image: $(VENV)/.train ## build the GPU image here (~7 GB) and train CPU ranks in it
	$(PY) -m pytest -m gpu_image tests/gpu_image/test_gpu_image.py $(PYTEST_ARGS)

# No venv prerequisite: the GPU machine may have no registry; the script finds its Python
# (GPU_PYTHON, else .venv/bin/python, else python3) and says what is missing.
gpu-check: ## 1 GPU, FSDP, bf16, 1B llama: NCCL probe, tokens/s, MFU -> docs/benchmarks.md (DRY_RUN=1)
	bash benchmarks/gpu_check.sh $(strip $(if $(call on,DRY_RUN),--dry-run) \
	  $(if $(STEPS),--steps $(STEPS)) $(if $(GPU_PYTHON),--python $(GPU_PYTHON)))

lint: $(VENV)/.train ## ruff format --check and ruff check
	$(VENV)/bin/ruff format --check . && $(VENV)/bin/ruff check .

fmt: $(VENV)/.train ## format and fix with ruff
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean: ## remove the virtual environment and build outputs (keeps runs/)
	rm -rf $(VENV) build
