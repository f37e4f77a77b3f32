"""The GPU check's dry run (benchmarks/gpu_check.sh --dry-run): everything a GPU is not needed
for, checked here: python and torch import, the FSDP fixture, the launcher's command for one GPU
rank and for the probe, the trainer's arguments, the 1B config on the meta device and its
parameter count, that the long records fill the sequence, and the MFU module on a sample run.
Arguments: the trainer's; the rest comes from GC_* variables set by gpu_check.sh."""

import os
import shlex
import sys
from pathlib import Path


def ok(what):
    print(f"  ok: {what}", flush=True)


def fail(what):
    print(f"  FAILED: {what}", flush=True)
    sys.exit(1)


train_args = sys.argv[1:]
seq, words = int(os.environ["GC_SEQ"]), int(os.environ["GC_WORDS"])
fixture, dry = os.environ["GC_FIXTURE"], Path(os.environ["GC_DRY"])
ok(f"python {sys.version.split()[0]} at {sys.executable}")
import torch  # noqa: E402

build = torch.version.cuda or "no (a CPU build: the real run needs the CUDA one, see the header)"
ok(
    f"torch {torch.__version__} imports; CUDA build: {build}; GPUs torch sees: "
    f"{torch.cuda.device_count()}"
)
import accelerate  # noqa: E402
import transformers  # noqa: E402

ok(f"transformers {transformers.__version__}, accelerate {accelerate.__version__} import")
acc = Path(os.environ["GC_PYBIN"], "accelerate")
acc.exists() or fail(f"{acc} missing: the launcher execs accelerate from PATH")
ok(f"{acc} exists")
from tuning.container import launch  # noqa: E402

Path(fixture).is_file() or fail(f"{fixture} missing")
kind = launch.distributed_type(fixture)
kind == "FSDP" or fail(f"{fixture} asks for {kind}, not FSDP")
ok(f"{os.path.relpath(fixture)} exists and asks for FSDP")
env = {
    "HARNESS_DEVICE": "gpu",
    "PET_NNODES": "1",
    "PET_NODE_RANK": "0",
    "PET_NPROC_PER_NODE": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29501",
    "ACCELERATE_CONFIG": fixture,
}
argv, extra = launch.command(env, train_args)
print("  launcher (train) renders: " + shlex.join(argv))
flags = dict(zip(argv, argv[1:], strict=False))
(
    flags.get("--num_processes") == "1"
    and flags.get("--config_file") == fixture
    and "--multi_gpu" not in argv
    and "ACCELERATE_USE_CPU" not in extra
    and extra.get("HARNESS_DISTRIBUTED_TYPE") == "FSDP"
) or fail("not 1 GPU rank under FSDP")
ok("the launcher gives 1 GPU rank, FSDP fixture, no --multi_gpu, no CPU override")
penv = {
    **env,
    "HARNESS_ENTRY": "tuning.container.probe",
    "HARNESS_ENTRY_ARGS": os.environ["GC_PROBE_ARGS"],
}
pargv, _ = launch.command(penv, [])
print("  launcher (probe) renders: " + shlex.join(pargv))
pargv[pargv.index("-m") + 1] == "tuning.container.probe" or fail("the probe is not the entry")
from tuning.container.probe import _parse_args  # noqa: E402

_parse_args(shlex.split(os.environ["GC_PROBE_ARGS"]))
ok("the probe accepts its arguments")
from tuning.container.sft.config_args import parse_args  # noqa: E402

cfg = parse_args(train_args, environ={})
(cfg.torch_dtype == "bfloat16" and cfg.save_strategy == "no") or fail("trainer arguments")
ok(
    f"the trainer accepts its arguments (torch_dtype {cfg.torch_dtype}, max_seq_length "
    f"{cfg.max_seq_length}, batch {cfg.per_device_train_batch_size}, {cfg.max_steps} steps)"
)
from tuning.container.demo_data import corpus  # noqa: E402
from tuning.container.tiny_model import LLAMA_1B, build_config_1b, build_tokenizer  # noqa: E402

tok = build_tokenizer(corpus(), model_max_length=LLAMA_1B["max_position_embeddings"])
config = build_config_1b(tok)
(dry / "model").mkdir(parents=True, exist_ok=True)
config.save_pretrained(dry / "model")
sys.path.insert(0, "benchmarks")
import mfu  # noqa: E402

n = mfu.count_params(dry / "model")
0.9e9 <= n["params"] <= 1.3e9 or fail(f"the 1B config has {n['params']:,} parameters")
ok(
    f"the 1B config builds on the meta device: {n['params']:,} parameters, "
    f"{n['non_embedding']:,} non-embedding"
)
seq <= tok.model_max_length or fail(f"seq {seq} > the tokenizer's {tok.model_max_length}")
from tuning.container.demo_data import write  # noqa: E402
from tuning.container.sft.data import load_examples, tokenize_examples  # noqa: E402

data = write(dry / "data.jsonl", n=2, seed=0, words=words)
for row in tokenize_examples(load_examples(str(data)), tok, seq, str(data)).rows:
    n_loss = sum(x != -100 for x in row["labels"])
    (len(row["input_ids"]) == seq and n_loss > seq // 3) or fail(
        f"a record of {words} words gives {len(row['input_ids'])} tokens ({n_loss} in the loss)"
    )
ok(f"a record of {words} words fills max_seq_length {seq} exactly ({n_loss} tokens in the loss)")
gpu = os.environ["GC_SAMPLE_GPU"]
code = mfu.main(["--model", str(dry / "model"), "--sample", str(dry / "run"), "--gpu", gpu])
code == 0 or fail("the MFU module on a sample run")
ok(f"the MFU module computes on a sample run (peak from the table for {gpu!r})")
