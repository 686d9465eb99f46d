"""The tiny language model the FSDP2 tests shard: an embedding, two linear blocks, a head (no trainmeter import)."""

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int, width: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(2))
        self.head = nn.Linear(width, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx)
        for block in self.blocks:
            h = torch.relu(block(h)) + 0.0
        return self.head(h) + 0.0
