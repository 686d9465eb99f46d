"""Worker functions the launch tests start in child processes (importable, so ``spawn`` can pickle them).

Importing trainmeter here is what lets a ``spawn`` child record itself as a rank
(trainmeter.ranks.autostart); forked children need nothing.
"""

import os
import signal
import time

import torch

import trainmeter  # noqa: F401  (arms the rank autostart in spawn children of a monitored run)

TOKENS_PER_STEP = 3 * 4  # 3 samples of 4 tokens


def train(index: int, steps: int, slow: int = -1, sleep_s: float = 0.0, kill_at: int = -1) -> None:
    """Train a tiny model ``steps`` steps as rank ``index`` of 2 (RANK set as accelerate's launcher does)."""
    os.environ["RANK"] = str(index)
    os.environ["LOCAL_RANK"] = str(index)
    os.environ["WORLD_SIZE"] = "2"
    torch.manual_seed(index)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, steps + 1):
        x = torch.randint(0, 50, (3, 4))
        time.sleep(sleep_s * (2 if index == slow else 1))
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
