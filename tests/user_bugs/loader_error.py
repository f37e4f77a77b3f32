"""An exception in one rank's data loader: one record of the file is malformed (no target),
and whichever rank's share holds it raises when its batch is built."""

import common

a = common.args()
rank, world = common.setup(a.timeout)
data = common.records(world * a.steps)
data[12 * world + 1] = (data[12 * world + 1][0], None)  # a record with its target missing


def batch(i):
    x, y = mine[i]
    if y is None:
        raise ValueError(f"record {i * world + rank} has no target")
    return [(x, y)]


mine = data[rank::world]
net = common.model()
opt = common.torch.optim.SGD(net.parameters(), lr=0.01)
for i in range(len(mine)):
    common.log(rank, i + 1, common.step(net, opt, batch(i), world))
common.done()
