"""Two gloo ranks of FSDP2 (``fully_shard``) that never import trainmeter (tests/field/test_fsdp2_loop.py).

Launched by ``!torchrun`` from a ``%%trainmeter`` cell, each rank is recorded by the autostart; launched bare, it
trains the same. Each rank writes its losses to ``$TM_OUT/rank<r>-$TM_TAG.json``. argv: steps batch seq vocab width
"""

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tiny_lm import TinyLM  # beside this script (its folder is first on sys.path)
from torch.distributed.fsdp import fully_shard

steps, batch, seq, vocab, width = (int(a) for a in sys.argv[1:6])


dist.init_process_group("gloo")
torch.manual_seed(0)
model = TinyLM(vocab, width)
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1 + dist.get_rank())
losses = []
for _ in range(steps):
    x = torch.randint(0, vocab, (batch, seq), generator=g)
    loss = F.cross_entropy(model(x).flatten(0, 1), x.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
    losses.append(float(loss.detach()))
with open(os.path.join(os.environ["TM_OUT"], f"rank{dist.get_rank()}-{os.environ['TM_TAG']}.json"), "w") as f:
    json.dump(losses, f)
dist.barrier()
dist.destroy_process_group()
