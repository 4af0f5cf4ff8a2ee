"""Packed sequences with a document mask: how much attention the kernel actually does.

Training data is packed: documents are concatenated and cut into sequences of `seq` tokens, and
the attention mask keeps each token inside its own document (Dubey et al. 2024, "The Llama 3 Herd
of Models", Sec. 3.2; Transformer Engine / Megatron-Core `qkv_format: thd` with cu_seqlens, the
FlashAttention "varlen" kernels, PyTorch FlexAttention's document masks). A fused kernel runs
each piece of a document that falls in the sequence as its own (causal) attention, so the work is
sum over pieces of pairs(l) instead of pairs(seq).

Document lengths are a gamma distribution of mean `mean` and coefficient of variation `cv`
(cv 1: exponential lengths; cv 0: every document `mean` tokens; web corpora are heavier-tailed,
cv > 1). Documents follow one another without gaps, so the boundaries inside a window of `seq`
tokens are a stationary renewal process of rate 1/mean: whole documents of length l start in it at
rate f(l)/mean, and the pieces cut at its two ends are the forward and backward recurrence times,
of density (1 - F)/mean (D. R. Cox, "Renewal Theory", 1962). The expected sum of g over the pieces
is therefore

    E[sum g] = int_0^seq g(l) f(l) (seq - l)/mean dl      whole documents inside the window
             + 2 int_0^seq g(r) (1 - F(r))/mean dr         the first and the last piece (the forward
                                                            and backward recurrence times)
             + g(seq) (1 - int_0^seq (1 - F(r))/mean dr)   no boundary at all: one piece of seq

f and F the length density and distribution. With g(l) = l this is seq (a check, tested). The
integrals are taken on a log-spaced grid of piece lengths (`pieces`); a kernel's rate depends on
its key length, so each attention op is timed piece length by piece length in a few bins
(`length_mix`).

Sequences of equal length carry unequal attention work, so data-parallel replicas that take them
at random wait for the heaviest at the gradient synchronisation (`replica_imbalance`, sampled from
a seeded stream of documents: `sequence_work`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Callable

import numpy as np

LOG_STEP = 0.005     # log spacing of the piece-length grid
SMALLEST = 1e-6      # of the shorter of the window and the mean: the grid's shortest piece
PEAK = 400           # linear grid points over mean +- 8 sd, where a narrow length distribution sits
BINS = 8             # piece-length bins an attention op is timed in
SAMPLED_DOCUMENTS = 1_000_000   # documents sampled for the per-sequence work distribution
SAMPLED_SUMS = 20_000           # replica sums drawn from it for the expected slowest replica
MIN_WINDOWS = 256               # sampled sequences at least; beyond, the central limit instead


@dataclass(frozen=True)
class Pieces:
    """Expected pieces of documents in one packed sequence: `counts[i]` pieces of length
    `lengths[i]` (quadrature weights; the last entry is the whole window)."""
    seq: int
    lengths: tuple
    counts: tuple

    def expected(self, g: Callable) -> float:
        """E[sum over the pieces of g(length)]."""
        return float(np.dot(self.counts, g(np.asarray(self.lengths))))

    def fraction(self) -> float:
        """Attention pairs of the pieces over those of the whole sequence (causal or not: both go
        as length squared)."""
        return self.expected(np.square) / float(self.seq) ** 2


@lru_cache(maxsize=32)
def pieces(seq: int, mean: float, cv: float) -> Pieces:
    """The expected piece lengths of a `seq`-token window of packed documents of `mean` tokens
    (gamma distributed with coefficient of variation `cv`; `cv` 0 = fixed length)."""
    from scipy import special      # here, not at import: only scenarios with documents pay for it
    S, mu = float(seq), float(mean)
    ls, w = _grid(S, mu, cv)
    lengths, counts = [], []
    if cv == 0:
        # every document mu tokens, the window at a uniform phase: whole documents of mu, and
        # first / last pieces uniform on [0, mu] (density 1/mu each)
        edge = np.where(ls < mu, 2.0 / mu, 0.0) * w
        lengths += list(ls)
        counts += list(edge)
        if mu < S:
            lengths.append(mu)
            counts.append((S - mu) / mu)
        lengths.append(S)
        counts.append(max(0.0, 1.0 - S / mu))
        return Pieces(seq, tuple(lengths), tuple(counts))
    k = 1.0 / (cv * cv)              # gamma shape and scale of mean mu
    theta = mu / k
    density = np.exp((k - 1) * np.log(ls) - ls / theta - special.gammaln(k) - k * math.log(theta))
    survival = special.gammaincc(k, ls / theta)
    whole = density * (S - ls) / mu * w
    edge = 2.0 * survival / mu * w
    # no boundary in the window: E[(X - seq)+] / mean for X the gamma length (its stop-loss
    # transform), in closed form rather than as 1 - the grid's integral (which misses (0, SMALLEST))
    x = S / theta
    none = max(0.0, float(special.gammaincc(k + 1, x) - S / mu * special.gammaincc(k, x)))
    return Pieces(seq, tuple(ls) + (S,), tuple(whole + edge) + (none,))


def _grid(S: float, mu: float, cv: float) -> tuple:
    """Piece lengths in (0, S] and their trapezoid weights: log-spaced from SMALLEST of the shorter
    of window and mean, plus a linear grid over the peak of a narrow distribution (and both sides
    of cv 0's step at the mean)."""
    lo = SMALLEST * min(S, mu)
    parts = [np.exp(np.linspace(math.log(lo), math.log(S), int(math.ceil(math.log(S / lo) / LOG_STEP)) + 1))]
    sd = cv * mu
    if sd < mu / 2:
        a, b = max(lo, mu - 8 * sd), min(S, mu + 8 * sd)
        if a < b:
            parts.append(np.linspace(a, b, PEAK))
        if cv == 0 and mu < S:
            parts.append(np.array([mu * (1 - 1e-9), mu]))
    ls = np.unique(np.concatenate(parts))
    ls = ls[(ls > 0) & (ls <= S)]
    gaps = np.diff(ls)
    w = np.zeros_like(ls)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    return ls, w


def length_mix(p: Pieces, g: Callable, bins: int = BINS) -> tuple:
    """(share, length) pairs: the shares of E[sum g] that pieces of about `length` tokens carry,
    in `bins` bins of log length, each at its g-weighted geometric mean length."""
    ls = np.asarray(p.lengths)
    order = np.argsort(ls, kind="stable")
    ls, work = ls[order], (np.asarray(p.counts) * g(ls))[order]
    total = float(work.sum())
    if total <= 0:
        return ()
    # bins over the lengths that carry the work: from where 0.1 % of it is done up to the window
    lo = ls[min(int(np.searchsorted(np.cumsum(work), 1e-3 * total)), len(ls) - 1)]
    edges = np.linspace(math.log(lo), math.log(p.seq), bins + 1)
    which = np.clip(np.searchsorted(edges, np.log(ls), side="right") - 1, 0, bins - 1)
    out = []
    for b in range(bins):
        sel = which == b
        wb = float(work[sel].sum())
        if wb > 1e-9 * total:
            out.append((wb / total, float(np.exp(np.dot(work[sel], np.log(ls[sel])) / wb))))
    return tuple(out)


def of_scenario(s) -> Pieces | None:
    """The scenario's document pieces (training.document_length), or None for one document per
    sequence."""
    tr = s.training
    if tr.document_length is None:
        return None
    return pieces(s.model.seq_length, float(tr.document_length), float(tr.document_length_cv))


def with_documents(s, ops: list) -> list:
    """`ops` of a layer with every fused attention op over the scenario's document pieces: its
    FLOPs times the pieces' share of the pairs, timed piece length by piece length (Op.seq_mix).
    A block of context-parallel attention scales with its document as the whole sequence does:
    Transformer Engine's THD layout cuts every document into the 2·CP load-balanced chunks
    (Megatron-Core context parallelism with packed sequences), so each ring step's block of a
    piece of l tokens is the whole sequence's block scaled by l / seq. A sliding-window band
    (model.window_size) covers min(l, window) keys back inside each piece; a chunked one attends
    within the pieces of each chunk (chunked_mix). The ops are timed at the heaviest data-parallel
    replica's documents (imbalance_of, a window band by its own work); their FLOPs stay the mean."""
    tr = s.training
    if tr.document_length is None:
        return ops
    key = (s.model.seq_length, float(tr.document_length), float(tr.document_length_cv))
    out = []
    for op in ops:
        if not op.flash:
            out.append(op)
            continue
        band = op.name == "attention_window"
        if band and s.model.window_kind == "chunked":
            frac, mix = chunked_mix(*key, int(op.flash[1]))
        else:
            frac, mix = attention_mix(*key, float(op.flash[1]) if band else 0.0)
        if not band:          # a block's key length scales with its piece: kv x l / seq
            mix = tuple((share, op.flash[1] * length, 0.0) for share, length, _ in mix)
        # the time of the slowest data-parallel replica's heavier documents; the FLOPs stay the mean
        slowest = imbalance_of(s, float(op.flash[1]) if band else 0.0)
        mix = tuple((share * slowest, length, band_seq) for share, length, band_seq in mix)
        out.append(replace(op, flops_fwd=frac * op.flops_fwd, flops_bwd=frac * op.flops_bwd,
                           measure_fwd=(), measure_bwd=(), seq_mix=mix))
    return out


@lru_cache(maxsize=256)
def attention_mix(seq: int, mean: float, cv: float, window: float) -> tuple:
    """(share of the whole sequence's pairs the pieces keep, ((share, length, band seq), ...)):
    for full attention (`window` 0) the lengths are fractions of the sequence (a block scales by
    them); for a sliding-window band of `window` keys they are the key lengths min(l, window), with
    the piece's length as the band's sequence where it is longer than the window."""
    p = pieces(seq, mean, cv)
    if not window:
        return p.fraction(), tuple((share, length / seq, 0.0) for share, length in length_mix(p, np.square))
    w = window
    pairs = lambda ls: np.where(ls <= w, ls * ls / 2, ls * w - w * w / 2)
    frac = p.expected(pairs) / float(pairs(np.asarray(float(seq))))
    return frac, tuple((share, min(length, w), length if length > w else 0.0) for share, length in length_mix(p, pairs))


@lru_cache(maxsize=64)
def chunked_mix(seq: int, mean: float, cv: float, chunk: int) -> tuple:
    """attention_mix of chunked attention (Llama 4's local layers: causal within chunks of
    `chunk` tokens) over packed documents: a chunk is a window of the same renewal process, so its
    pieces are those of a `chunk`-token sequence; the last, shorter chunk likewise."""
    whole, tail = divmod(seq, chunk)
    parts = [(whole, chunk)] + ([(1, tail)] if tail else [])
    # pairs of each part with and without documents (both causal: l^2 / 2 per piece)
    pairs = [(n * pieces(c, mean, cv).expected(np.square), n * c * c, c) for n, c in parts if n]
    total = sum(p for p, _, _ in pairs)
    mix = tuple((share * p / total, length * c, 0.0) for p, _, c in pairs
                for share, length, _ in attention_mix(c, mean, cv, 0.0)[1])
    return total / sum(full for _, full, _ in pairs), mix


@lru_cache(maxsize=32)
def sequence_work(seq: int, mean: float, cv: float, window: float = 0.0, chunked: bool = False,
                  seed: int = 1) -> np.ndarray:
    """Attention pairs of sampled sequences: a seeded stream of documents (the gamma lengths, one
    token at least) cut into windows of `seq` tokens, as a packing data loader cuts it; per
    sequence the sum over its pieces of l^2 (full attention), of a sliding band of `window` keys'
    pairs, or (`chunked`) of l^2 over the pieces cut at every `window`-token chunk as well. The
    full attention's mean is `pieces(seq, mean, cv).fraction() * seq**2` up to the sampling error
    (tested)."""
    rng = np.random.default_rng(seed)
    windows = int(min(4096, max(MIN_WINDOWS, SAMPLED_DOCUMENTS * mean / seq)))
    total = float(seq) * windows
    k = 1.0 / (cv * cv) if cv else 0.0
    draw = lambda n: np.maximum(rng.gamma(k, mean / k, size=n) if k else np.full(n, float(mean)), 1.0)
    ends = np.cumsum(draw(int(total / mean * 1.2) + 16))
    while ends[-1] < total:
        ends = np.concatenate([ends, ends[-1] + np.cumsum(draw(int(total / mean * 0.2) + 16))])
    ends = ends - rng.uniform(0.0, ends[0])             # the stream starts at a random phase
    edges = [float(seq) * np.arange(1, windows)]
    if chunked:                                         # chunks restart in every sequence
        inner = np.arange(window, seq, window)
        edges.append((float(seq) * np.arange(windows)[:, None] + inner[None, :]).ravel())
    cuts = np.unique(np.concatenate([[0.0, total], ends[(ends > 0) & (ends < total)], *edges]))
    gaps = np.diff(cuts)
    which = ((cuts[:-1] + cuts[1:]) / 2 // seq).astype(np.int64)
    if window and not chunked:
        pairs = np.where(gaps <= window, gaps * gaps / 2, gaps * window - window * window / 2)
    else:
        pairs = gaps * gaps
    return np.bincount(which, weights=pairs, minlength=windows)


@lru_cache(maxsize=256)
def replica_imbalance(seq: int, mean: float, cv: float, replicas: int, per_replica: int,
                      window: float = 0.0, chunked: bool = False) -> float:
    """E[the heaviest of `replicas` data-parallel replicas' attention work] over the mean, each
    replica taking `per_replica` sequences of packed documents at random: the replicas meet at
    the gradient synchronisation, so the step is the slowest one's ("data-parallel computational
    imbalance" of packed sequences, NVIDIA, "Speeding Up Variable-Length Training with Dynamic
    Context Parallelism and NVIDIA Megatron Core", 2026). A replica's sum is drawn from the
    sampled sequences (normal beyond 64 of them); the expected maximum of `replicas` draws is
    taken on their empirical distribution, E[max] = sum x_(i) ((i/N)^R - ((i-1)/N)^R). `window`,
    `chunked`: a window band's work instead of full attention's (sequence_work)."""
    if replicas <= 1:
        return 1.0
    if seq / mean * MIN_WINDOWS > SAMPLED_DOCUMENTS:
        # thousands of documents a sequence: its work is normal, by the renewal-reward central
        # limit theorem (Var sum over a window of n = seq/mean documents of Y = l^2 is n Var(Y - a l),
        # a = E[l^2]/mean: the lengths must fill the window), so of spread
        # sqrt(r4 - 2(k+1) r3 + (k+1)^2 r2) / (r2 sqrt(n)), r_j = k(k+1)...(k+j-1) the gamma moments
        # over scale^j (shape k; 0 for fixed lengths). A window band's work varies less: this
        # spread is its upper bound
        spread = 0.0
        if cv:
            k = 1.0 / (cv * cv)
            r2, r3, r4 = k * (k + 1), k * (k + 1) * (k + 2), k * (k + 1) * (k + 2) * (k + 3)
            spread = math.sqrt(max(0.0, r4 - 2 * (k + 1) * r3 + (k + 1) ** 2 * r2)) / r2
        mu = pieces(seq, mean, cv).fraction() * float(seq) ** 2
        sd = mu * spread / math.sqrt(seq / mean)
        work = None
    else:
        work = sequence_work(seq, mean, cv, window, chunked)
        mu, sd = float(work.mean()), float(work.std())
    if mu <= 0 or sd <= 0:
        return 1.0
    rng = np.random.default_rng(2)
    if work is not None and per_replica <= 64:
        sums = work[rng.integers(0, len(work), size=(SAMPLED_SUMS, per_replica))].sum(axis=1)
    else:
        sums = rng.normal(per_replica * mu, math.sqrt(per_replica) * sd, size=SAMPLED_SUMS)
    sums = np.sort(sums)
    cdf = np.arange(1, SAMPLED_SUMS + 1) / SAMPLED_SUMS
    weights = cdf ** replicas - np.concatenate([[0.0], cdf[:-1]]) ** replicas
    return max(1.0, float(np.dot(sums, weights)) / (per_replica * mu))


def imbalance_of(s, window: float = 0.0) -> float:
    """The scenario's replica_imbalance (1 with balanced packing or one replica), of full attention
    or of its window band of `window` keys (sliding or chunked as the model's windows are)."""
    tr, par = s.training, s.parallel
    if tr.document_length is None or tr.document_packing == "balanced" or par.data <= 1:
        return 1.0
    per_replica = max(1, tr.global_batch_size // par.data)
    return replica_imbalance(s.model.seq_length, float(tr.document_length), float(tr.document_length_cv),
                             par.data, per_replica, window, bool(window) and s.model.window_kind == "chunked")


def documents_text(s) -> str:
    """The documents for the reports (~N tokens (cv c): full attention does x % of the whole
    sequence's pairs), empty without documents."""
    p = of_scenario(s)
    if p is None:
        return ""
    tr = s.training
    head = f"~{tr.document_length:,} tokens (cv {tr.document_length_cv:g})"
    if tr.attention != "flash":
        return head + ": eager attention computes every score under the mask"
    text = head + f": full attention does {100 * p.fraction():.1f} % of the whole sequence's pairs"
    slowest = imbalance_of(s)
    if slowest > 1.0005:
        text += (f"; packed at random, the slowest of {s.parallel.data} data-parallel replicas does "
                 f"{100 * (slowest - 1):.1f} % more attention work than the mean")
    return text


def documents_clause(s) -> str:
    """", packed documents of ..." for a summary line, empty without documents."""
    text = documents_text(s)
    return f", packed documents of {text}" if text else ""


def document_ids(seq: int, mean: float, cv: float, seed: int = 0) -> np.ndarray:
    """A packed sequence's document of every position: lengths drawn (seeded) from the gamma
    distribution of `mean` and `cv` (cv 0: all `mean`), at least one token each, the last cut at
    `seq`. The emulator masks attention with it (pipesim/emulator/context.py)."""
    rng = np.random.default_rng(seed)
    k = 1.0 / (cv * cv) if cv else 0.0
    ids, start, doc = np.empty(seq, dtype=np.int64), 0, 0
    while start < seq:
        length = max(1, int(round(rng.gamma(k, mean / k) if k else mean)))
        ids[start:start + length] = doc
        start, doc = start + length, doc + 1
    return ids
