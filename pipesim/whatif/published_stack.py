"""The training stack a published run used, as far as its row tells: the framework its source
names (framework_of), and which features (and GPUs) it could have used, from the date its source
was published: a run reported before a feature reached Megatron-LM's main branch ran without it.

The `other` validation family (validation_generic.py) assumes the 2024-26 Megatron-Core stack for
whatever a row does not state; for a row from 2020-22 that stack did not exist (no FlashAttention,
no sequence parallelism, no distributed optimizer, gradients reduced after the backward). The
dates below are the merges into NVIDIA/Megatron-LM main (`git log --first-parent -S<flag>` of
megatron/arguments.py, read at d98e8a64dd, 2026), each beside its commit.
"""
from __future__ import annotations

import calendar
import re
from datetime import date

FEATURE_DATES = {
    # --async-tensor-model-parallel-allreduce: the TP input-gradient all-reduce behind the
    # weight-gradient GEMM (6e1bde1e0f, merge of slym/allreduce_custom)
    "tp_grad_overlap": date(2021, 9, 2),
    # --sequence-parallel and selective recompute (9aad9203aa; Korthikanti et al. 2022,
    # arXiv:2205.05198). Before it the only recompute was the full layer, which Megatron-LM's
    # example scripts turned on (examples/pretrain_gpt.sh @ 152aab304d, Jan 2021:
    # --checkpoint-activations)
    "sequence_parallel": date(2022, 5, 20),
    # --use-distributed-optimizer (d07d29df14, merge of lmcafee/distrib-opt-nodupe); before it
    # Megatron's default --DDP-impl local all-reduced the gradients after the backward
    "distributed_optimizer": date(2022, 6, 8),
    # --use-flash-attn (285068c810, PR #267); before it attention materialised the scores
    # (fused scale-mask-softmax)
    "flash_attention": date(2023, 1, 11),
    # --overlap-grad-reduce (e801b2bb2f) and --overlap-param-gather (3b417268a2): before them the
    # gradient reduction and the parameter gather waited for the whole backward / optimizer step
    "overlap_grad_reduce": date(2023, 9, 7),
    "overlap_param_gather": date(2023, 11, 17),
    # DeepSpeed's ZeRO-3 gathers one parameter at a time with torch.cuda.synchronize() and an
    # explicit copy until deepspeedai/DeepSpeed PR #1188 (opened 2021-06-25)
    "deepspeed_zero3_async_gather": date(2021, 6, 25),
    # torchtitan wraps the embedding and the output layer in FSDP2 units of their own
    # (pytorch/torchtitan 83e6941); before, they sat in the root unit (training.fsdp2_ends_in_root)
    "torchtitan_own_end_units": date(2025, 7, 28),
    # torchtitan compiles the loss with the model (components/loss.py at e7c0cae, 2025); at 9dec370
    # (Dec 2024) it did not ("compiling loss function causes CUDA errors")
    "torchtitan_compiled_loss": date(2025, 1, 1),
    # the A100 80GB (NVIDIA press release "NVIDIA Doubles Down: Announces A100 80GB GPU", SC20,
    # 2020-11-16): an "A100" of an earlier run is the 40 GB part
    "a100_80gb": date(2020, 11, 16),
}

def _month_end(year: int, month: int) -> date:
    return date(year, month, calendar.monthrange(year, month)[1])


def _dates_in(text: str) -> list[date]:
    """Every date a source text states, each as the latest day it can mean: ISO dates
    (2024-07-15, or 2024-07 as the month's end), arXiv identifiers (2104.04473: April 2021's end),
    bare years (2020: its last day) and conference years ('SC'21')."""
    found = []
    for y, m, d in re.findall(r"(?<![\w.])(20\d\d)-(\d\d)(?:-(\d\d))?\b", text):
        if 1 <= int(m) <= 12:
            found.append(date(int(y), int(m), int(d)) if d and 1 <= int(d) <= 28 else _month_end(int(y), int(m)))
    for yy, mm in re.findall(r"arXiv[:\s]*(\d\d)(\d\d)\.\d{4,5}", text, flags=re.IGNORECASE):
        if 1 <= int(mm) <= 12:
            found.append(_month_end(2000 + int(yy), int(mm)))
    stripped = re.sub(r"\b20\d\d-\d\d(-\d\d)?\b", " ", text)
    found += [date(int(y), 12, 31) for y in re.findall(r"(?<![\w.])(20[12]\d)(?![\w.])", stripped)]
    found += [date(2000 + int(yy), 12, 31) for yy in re.findall(r"[A-Za-z]'(\d\d)\b", text)]
    return found


def reported_by(case_raw: dict) -> date | None:
    """The latest date the run can have: the earliest date its `source` states (a run cannot be
    newer than a document that reports it); None when the source states no date."""
    source = case_raw.get("source")
    if source is None:
        return None
    dates = _dates_in(_flatten(source))
    return min(dates) if dates else None


# Container versions a source names (YY.MM, NVIDIA's NGC / NeMo numbering): "25.11 NeMo Container",
# "NeMo24.03.01 container", MLPerf result folders "..._ngc25.09_nemo".
_CONTAINER = re.compile(r"ngc(\d\d)\.(\d\d)|(\d\d)\.(\d\d)(?:\.\d+)?(?:\.rc\d+)? nemo container|"
                        r"nemo ?(\d\d)\.(\d\d)(?:\.\d+)?(?:\.rc\d+)? container", re.IGNORECASE)


# MLPerf Training rounds by their results' publication (mlcommons.org results pages): a submission's
# software is no newer than its round.
MLPERF_ROUNDS = {"3.0": date(2023, 6, 27), "3.1": date(2023, 11, 8), "4.0": date(2024, 6, 12),
                 "4.1": date(2024, 11, 13), "5.0": date(2025, 6, 4), "5.1": date(2025, 11, 12)}


def software_date(case_raw: dict) -> date | None:
    """The latest date of the software a published run used: the end of the month of the container
    its source names, else its MLPerf round's publication, else the date its source was reported by
    (reported_by)."""
    text = _flatten(case_raw.get("source") or "")
    m = _CONTAINER.search(text)
    if m is None:
        round_ = re.search(r"training_results_v(\d\.\d)", text)
        return MLPERF_ROUNDS.get(round_.group(1)) if round_ else reported_by(case_raw)
    yy, mm = next((int(a), int(b)) for a, b in zip(m.groups()[::2], m.groups()[1::2]) if a)
    return _month_end(2000 + yy, mm) if 1 <= mm <= 12 else reported_by(case_raw)


def with_software_date(scenario: dict, when: date | None) -> dict:
    """`scenario` (file keys) with `training.software_date` set to `when` (unless it names one):
    the stack's fused attention then runs the cuDNN of that date (costs/flash.py dated_cudnn) where
    the row leaves the kernel to Transformer Engine - a 2025 Blackwell run did not have 2026's cuDNN,
    whose backward is up to 1.8x faster, nor a 2024 Hopper run 2026's."""
    training = scenario.get("training", {})
    if when is None or "software_date" in training:
        return scenario
    return dict(scenario, training=dict(training, software_date=f"{when:%Y-%m-%d}"))


def _flatten(value) -> str:
    if isinstance(value, dict):
        return " ".join(_flatten(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return " ".join(_flatten(v) for v in value)
    return str(value)


def had(feature: str, when: date | None) -> bool:
    """Whether a run reported by `when` could use `feature` (True when the date is unknown: the
    current stack)."""
    return when is None or when >= FEATURE_DATES[feature]


# framework -> words in a row's source (or training.stack / training.framework) that name it, the
# most specific first; anything else is read as Megatron-LM / Megatron-Core
FRAMEWORKS = (("torchtitan", ("torchtitan",)), ("automodel", ("automodel",)),
              ("nemo", ("nemo", "megatron-bridge")),
              ("transformers", ("hf-transformers", "hugging face transformers", "huggingface transformers")))


def framework_of(case_raw: dict) -> str:
    """torchtitan, automodel (NeMo AutoModel), nemo (NeMo or Megatron-Bridge, both on Megatron-Core
    with NVIDIA's performance recipes), transformers (Hugging Face's eager modeling code) or
    megatron: from the words of the row's source and stack."""
    training = case_raw.get("training") if isinstance(case_raw.get("training"), dict) else {}
    text = " ".join(_flatten(v) for v in (case_raw.get("source"), training.get("stack"),
                                          training.get("framework")) if v is not None).lower()
    return next((name for name, words in FRAMEWORKS if any(w in text for w in words)), "megatron")


def stack_label(case_raw: dict) -> str:
    """What a row was read as, for the validation table: the framework and the date that bound
    its stack ("stack: megatron of 2021-04", "stack: torchtitan, undated")."""
    when = reported_by(case_raw)
    return f"stack: {framework_of(case_raw)}" + (f" of {when:%Y-%m}" if when else ", undated")
