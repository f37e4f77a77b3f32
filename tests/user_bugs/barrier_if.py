"""A barrier inside an if: rank 0 writes a sample file at step 12 and waits for the others to
see it, but the barrier sits inside the rank-0 branch, so only rank 0 calls it."""

import os

import common

a = common.args()
rank, world = common.setup(a.timeout)
net = common.model()
opt = common.torch.optim.SGD(net.parameters(), lr=0.01)
data = common.records(world * a.steps)
for i in range(a.steps):
    loss = common.step(net, opt, [data[i * world + rank]], world)
    if i == 11 and rank == 0:
        with open(os.path.join(a.output_dir, "sample.txt"), "w") as f:
            f.write(str(loss))
        common.dist.barrier()  # meant for every rank: the others never reach it
    common.log(rank, i + 1, loss)
common.done()
