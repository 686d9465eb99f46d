"""A 2-rank gloo DDP run under torchrun that never imports trainmeter (tests/ranks/test_torchrun.py).

Launched from a monitored parent, each rank is recorded by the autostart. argv: steps
"""

import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(sys.argv[1])
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(16 * 8, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(steps):
    loss = model(torch.randint(0, 100, (4, 8))).pow(2).mean()  # 4 samples of 8 tokens per rank per step
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.barrier()
dist.destroy_process_group()
