"""Tensors of different shapes from uneven padding: each rank pads its batch to its OWN longest
sequence, then gathers the padded batches of every rank to score them, with a buffer the shape
of its own. One rank's batch at step 12 holds a longer sequence than every other rank's."""

import common

a = common.args()
rank, world = common.setup(a.timeout)
net = common.model()
opt = common.torch.optim.SGD(net.parameters(), lr=0.01)
data = common.records(world * a.steps)
for i in range(a.steps):
    loss = common.step(net, opt, [data[i * world + rank]], world)
    length = 9 if (i == 11 and rank == world - 1) else 8  # the batch's longest sequence here
    padded = common.torch.zeros(4, length)
    gathered = [common.torch.empty_like(padded) for _ in range(world)]
    common.dist.all_gather(gathered, padded)
    common.log(rank, i + 1, loss)
common.done()
