"""An HF Trainer script whose callback all-reduces a number on rank 0 only at step 6: the call
was meant for every rank, but sits under `is_world_process_zero`. Rank 0 waits in that
all_reduce; the others go on into step 7's collectives and wait there. The process group's
timeout is TrainingArguments' ddp_timeout (`--ddp_timeout` in ARGS). A user's script as they
write it: it knows nothing of the harness."""

import torch
import torch.distributed as dist
from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainingArguments


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 1)

    def forward(self, x, y):
        return {"loss": torch.nn.functional.mse_loss(self.lin(x), y)}


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(16, generator=g), "y": torch.randn(1, generator=g)}


class ReportLoss(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 6 and state.is_world_process_zero:
            total = torch.tensor([1.0])
            dist.all_reduce(total)  # the bug: every rank should call it


def main():
    (args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()
    Trainer(model=Net(), args=args, train_dataset=Data(), callbacks=[ReportLoss()]).train()


if __name__ == "__main__":
    main()
