"""Muon on an emulated rank (training.optimizer: muon), the update pipesim/costs/muon.py costs:
momentum, Newton-Schulz orthogonalisation of each 2-D hidden weight (Q, K and V apart), update.

The iteration is torch.optim.Muon's (K. Jordan et al. 2024): X / ||X||, then `steps` times
A = X Xᵀ, B = b·A + c·A A, X = a·X + B X, on the wide orientation. Momentum as Megatron-Core's
default (muon_momentum 0.95, no Nesterov), the update scaled by sqrt(max(1, rows/cols))
(torch.optim.Muon's "original" learning-rate adjustment). The CPU ranks run it in fp32 (the rate
a CPU profile measures; GPUs run it in bf16). Each rank orthogonalises the shards it holds
(the emulator runs ZeRO-0, so every data-parallel rank does all of them; with tensor
parallelism, blockwise: check_supported refuses the duplicated mode's gathers).
"""
from __future__ import annotations

import torch

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)     # torch.optim.Muon defaults (Jordan et al. 2024)
MOMENTUM = 0.95                                   # Megatron-Core OptimizerConfig.muon_momentum
EPS = 1e-7


def orthogonalize(g: torch.Tensor, steps: int) -> torch.Tensor:
    a, b, c = NS_COEFFICIENTS
    x = g.float()
    wide = x.shape[0] <= x.shape[1]
    x = x if wide else x.T
    x = x / x.norm().clamp(min=EPS)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x if wide else x.T


def split_rows(t: torch.Tensor, split: tuple[int, ...] | None) -> list[torch.Tensor]:
    """A fused QKV weight's Q, K and V blocks (rows grouped per key/value head: [q | k | v]), each
    gathered over the groups (Megatron-Core TensorParallelMuon.orthogonalize, muon_split_qkv)."""
    if split is None:
        return [t]
    groups = t.shape[0] // sum(split)
    return [blk.reshape(-1, t.shape[1]) for blk in t.view(groups, sum(split), -1).split(list(split), dim=1)]


def join_rows(blocks: list[torch.Tensor], split: tuple[int, ...] | None, like: torch.Tensor) -> torch.Tensor:
    if split is None:
        return blocks[0]
    groups = like.shape[0] // sum(split)
    return torch.cat([blk.view(groups, s, -1) for blk, s in zip(blocks, split)], dim=1).view_as(like)


class MuonStep:
    """Momentum buffers and the orthogonalised update of `params` (fp32 targets); `splits[i]`:
    the QKV row split of params[i] (None for an ordinary matrix)."""

    def __init__(self, params: list, splits: list, lr: float, steps: int):
        self.params, self.splits, self.lr, self.steps = params, splits, lr, steps
        self.bufs = [torch.zeros_like(p) for p in params]

    @torch.no_grad()
    def step(self) -> None:
        for p, buf, split in zip(self.params, self.bufs, self.splits):
            buf.lerp_(p.grad, 1 - MOMENTUM)
            update = join_rows([orthogonalize(blk, self.steps) for blk in split_rows(buf, split)], split, buf)
            p.add_(update, alpha=-self.lr * max(1.0, p.shape[0] / p.shape[1]) ** 0.5)
