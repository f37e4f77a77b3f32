"""One rank stuck loading data: its share of the files sits on a slow mount, and at step 12
reading the next shard never returns. The others wait in the step's all_reduce until the
process group's timeout; the stuck rank never enters it (the NCCL watchdog's classic)."""

import time

import common

a = common.args()
rank, world = common.setup(a.timeout)
net = common.model()
opt = common.torch.optim.SGD(net.parameters(), lr=0.01)
data = common.records(world * a.steps)


def load(i):
    if i == 11 and rank == world - 2:  # this rank's next shard: the read never comes back
        time.sleep(10 * a.timeout)
    return [data[i * world + rank]]


for i in range(a.steps):
    common.log(rank, i + 1, common.step(net, opt, load(i), world))
common.done()
