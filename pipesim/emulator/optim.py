"""Gradient buffers and the optimizer of one emulated rank.

Gradients live in one flat buffer per stage (Megatron's contiguous grad buffer), so data-parallel
buckets are slices of it. Mixed precision keeps fp32 master weights in the optimizer (Micikevicius
et al. 2018, "Mixed Precision Training", Sec. 3.1); Adam follows Kingma & Ba 2015, Algorithm 1.
"""
from __future__ import annotations

import torch

ADAM_BETAS = (0.9, 0.999)   # Kingma & Ba 2015, Sec. 2 defaults
ADAM_EPS = 1e-8
LR = 1e-4


def unique_params(modules, learning: bool = True) -> list:
    """The parameters, each once; `learning`: only those that learn (a frozen LoRA base left out)."""
    seen, out = set(), []
    for m in modules:
        for p in m.parameters():
            if id(p) not in seen and (p.requires_grad or not learning):
                seen.add(id(p))
                out.append(p)
    return out


def attach_grad_buffer(params) -> torch.Tensor:
    """Allocate one zeroed buffer and point every parameter's .grad at its slice."""
    n = sum(p.numel() for p in params)
    dtype = params[0].dtype if params else torch.float32
    device = params[0].device if params else "cpu"
    buf = torch.zeros(n, dtype=dtype, device=device)
    off = 0
    for p in params:
        p.grad = buf[off:off + p.numel()].view_as(p)
        off += p.numel()
    return buf


def adam(targets):
    try:
        return torch.optim.Adam(targets, lr=LR, betas=ADAM_BETAS, eps=ADAM_EPS, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(targets, lr=LR, betas=ADAM_BETAS, eps=ADAM_EPS, foreach=True)


def muon_managed(p, name: str) -> bool:
    """Muon takes 2-D weights but the embeddings and the output layer (Megatron-Core
    emerging_optimizers._is_muon_excluded)."""
    return p.dim() == 2 and not name.startswith(("embedding.", "head."))


class Optimizer:
    """Adam or SGD with momentum over `params` (torch's fused single-pass kernels where the
    device has them, as Megatron uses a fused Adam); fp32 master copies when params are not fp32.
    Muon (pipesim/emulator/muon.py) takes the 2-D hidden weights, Adam the rest: `muon` =
    (names: id(param) -> global name, qkv_split: the local QKV row split, Newton-Schulz steps)."""

    def __init__(self, params, kind: str = "adam", muon: tuple | None = None):
        self.params, self.kind = list(params), kind
        self.mixed = bool(self.params) and self.params[0].dtype != torch.float32
        if self.mixed:
            self.master = [p.detach().float().clone().requires_grad_() for p in self.params]
            targets = self.master
        else:
            self.master, targets = None, self.params
        self.opt, self.muon, self.matrix_numel = None, None, 0
        if not targets:
            return
        if kind == "adam":
            self.opt = adam(targets)
        elif kind == "sgd":
            self.opt = torch.optim.SGD(targets, lr=LR, momentum=0.9, foreach=True)
        elif kind == "muon" and muon is not None:
            from pipesim.emulator.muon import MuonStep
            names, qkv_split, steps = muon
            picked = [i for i, p in enumerate(self.params) if muon_managed(p, names.get(id(p), ""))]
            self.matrix_numel = sum(self.params[i].numel() for i in picked)
            splits = [qkv_split if names[id(self.params[i])].endswith(".qkv.weight") else None for i in picked]
            self.muon = MuonStep([targets[i] for i in picked], splits, LR, steps)
            rest = [t for i, t in enumerate(targets) if i not in set(picked)]
            self.opt = adam(rest) if rest else None
        else:       # check_supported refuses the others first; never run SGD in their place
            from pipesim.errors import ScenarioError
            raise ScenarioError(f"training.optimizer {kind!r} is not emulated here; use adam or sgd")

    def nbytes(self) -> float:
        """Optimizer state bytes (torch allocates them at the first step): Adam m and v or the
        SGD (Muon) momentum in fp32, plus the fp32 master weights under mixed precision."""
        states = 2 if self.kind in ("adam", "muon") else 1
        total = sum(p.numel() for p in self.params)
        per = 4 * states + (4 if self.mixed else 0)
        return float(per * total - 4 * self.matrix_numel)

    def step(self) -> None:
        self.step_matrices()
        self.step_rest()

    @torch.no_grad()
    def step_matrices(self) -> None:
        """The main gradients (fp32 masters) and Muon's step of its matrices (the simulator's
        NEWTON_SCHULZ: the emulator times it apart)."""
        if self.mixed:
            for m, p in zip(self.master, self.params):
                m.grad = p.grad.float()
        if self.muon is not None:
            self.muon.step()

    @torch.no_grad()
    def step_rest(self) -> None:
        """Adam or SGD over the rest, then the masters back into the model weights."""
        if self.opt is not None:
            self.opt.step()
        if self.mixed:
            for m, p in zip(self.master, self.params):
                p.copy_(m)
