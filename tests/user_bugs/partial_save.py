"""A save that only some ranks enter: the model's full weights are gathered from every rank's
shard to save them, but only rank 0 runs the save, so it waits in the gather alone while the
others go on to the next step."""

import os

import common

a = common.args()
rank, world = common.setup(a.timeout)
net = common.model()
opt = common.torch.optim.SGD(net.parameters(), lr=0.01)
data = common.records(world * a.steps)


def save_full(step_no):
    """Every rank's copy of the first layer, gathered (as a sharded model's save gathers)."""
    shard = net[0].weight.detach().clone()
    parts = [common.torch.empty_like(shard) for _ in range(world)]
    common.dist.all_gather(parts, shard)
    common.torch.save(parts, os.path.join(a.output_dir, f"weights-{step_no}.pt"))


for i in range(a.steps):
    loss = common.step(net, opt, [data[i * world + rank]], world)
    if (i + 1) % 12 == 0 and rank == 0:  # the bug: the gather needs every rank
        save_full(i + 1)
    common.log(rank, i + 1, loss)
common.done()
