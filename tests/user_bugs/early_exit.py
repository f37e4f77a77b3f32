"""A rank that runs out of data a batch early and leaves the loop: the records are split by
rank with no padding, and there is one fewer than the ranks x steps, so the last rank's share
is a batch short. It returns while the others wait in the last step's all_reduce."""

import common

a = common.args()
rank, world = common.setup(a.timeout)
data = common.records(world * a.steps - 1)
mine = data[rank::world]  # the last rank gets one record fewer
net = common.model()
opt = common.torch.optim.SGD(net.parameters(), lr=0.01)
for i, record in enumerate(mine, 1):
    common.log(rank, i, common.step(net, opt, [record], world))
common.done()
