"""A 2-rank gloo DDP run under torchrun, monitored with tm.monitor() (tests/ranks/test_torchrun.py).

argv: run_root steps slow_rank(-1 for none) sleep_s
"""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import trainmeter as tm

root, steps, slow, sleep_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
with tm.monitor(name="ddp", run_dir=root, interval_s=0.1):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(16 * 8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randint(0, 100, (4, 8))  # 4 samples of 8 tokens per rank per step
        time.sleep(sleep_s * (2 if rank == slow else 1))  # the slow rank's loader is 2x slower
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    dist.barrier()
    dist.destroy_process_group()
