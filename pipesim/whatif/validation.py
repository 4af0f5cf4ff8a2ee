"""The validation suite: published training measurements (scenarios/validation/published.yaml,
each with its citation) turned into pipesim scenarios, predicted, and compared.

Suites (by case id prefix):
  sc21-table1   Narayanan et al. SC'21 Table 1 (weak scaling, PTD-P)    target MAPE <= 5 %
  sc21-table2   Narayanan et al. SC'21 Table 2 (PTD-P vs ZeRO-3)        target MAPE <= 10 %
  megatron-v1   NVIDIA/Megatron-LM README 2020 (tensor/data scaling)     no target (reported)
                (these three: converter in pipesim/whatif/validation_sc21.py)
  llama3-405b   Dubey et al. 2024 (Llama 3) Table 4, CP1 / CP16           target MAPE <= 10 %
                (converter and metric in pipesim/whatif/validation_cp.py: model FLOPs, no recompute)

Metric: TFLOP/s per GPU counted as the paper counts it, Narayanan et al. SC'21 Eq. 3
(`pipesim.costs.summary.megatron_flops(s, recompute=True)`: 4 passes with full recomputation),
divided by the predicted step time and the GPU count. Every case ran with full activation
recomputation (stated for Table 1; Table 2 and the 2020 README numbers reproduce Eq. 3 with
recompute from their iteration times, e.g. megv1-mp-1B-DGX-2: 8.06e13 FLOP / 1.121 s = 71.9 TF).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

from pipesim.errors import PipesimError, ScenarioError

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "scenarios" / "validation" / "published.yaml"
# Published runs outside the shared set, kept apart so the shared file stays a verbatim copy.
HELDOUT_FILE = DEFAULT_FILE.with_name("heldout.yaml")

SUITES = {
    "sc21-table1": ("sc21-t1-", 5.0),
    "sc21-table2": ("sc21-t2-", 5.0),
    "megatron-v1": ("megv1-", None),
    "mcore-h100": ("mcore-h100-", 8.0),      # pipesim/whatif/families.py
    "nemo2407": ("nemo2407-", 8.0),
    "llama3-405b": ("llama3-405b-", 10.0),  # pipesim/whatif/validation_cp.py
    "korthikanti22": ("rac22-", None),       # held out: pipesim/whatif/validation_heldout.py
    "bridge2511": ("bridge2511-", None),     # held out: pipesim/whatif/validation_bridge.py
    "bridge2604": ("bridge2604-", None),     # held out: the same converter, the 26.04.01 tables
    "bridge2606": ("bridge2606-", None),     # held out: the same converter, the 26.06 tables
    "bridge2608": ("bridge2608-", None),     # held out: the same converter, the 26.08 tables
    "bridgemem": ("bridgemem-", None),       # held out: the same converter, Bridge's recompute study (memory)
    "titan2024": ("titan2024-", None),       # held out: pipesim/whatif/validation_titan.py
    "automodel": ("automodel-", None),       # held out: pipesim/whatif/validation_automodel.py
    "titan2025": ("titan2025-", None),       # held out: pipesim/whatif/validation_titan.py
    "titan2412": ("titan2412-", None),       # held out: the same converter, 1D-4D on H100, with memory
    "titan2506": ("titan2506-", None),       # held out: the same converter, async TP on H100 (June 2025)
    "sdpa2025": ("sdpa2025-", None),         # held out: pipesim/whatif/validation_sdpa.py
    "mlperf": ("mlperf-", None),             # held out: pipesim/whatif/validation_mlperf.py
    "mlperflora": ("mlperflora-", None),     # held out: the same converter, llama2_70b_lora (LoRA)
    "nemolongseq": ("nemolongseq-", None),   # held out: pipesim/whatif/validation_longseq.py
    "dsv3": ("dsv3-", None),                 # held out: pipesim/whatif/validation_dsv3.py
    "megds": ("megds-", None),               # held out: Megatron-DeepSpeed runs, read as `other` rows are
    "foundry": ("foundry-", None),           # held out: pipesim/whatif/validation_foundry.py
    "mcoregb200": ("mcoregb200-", None),     # held out: Megatron-Core DeepSeek-V3 on GB200, rows naming a scenario
    "other": ("", None),                     # any other id: pipesim/whatif/validation_generic.py
}
# Suites whose rows the generic mapping reads (validation_generic.py), each row with its own metric
GENERIC_SUITES = ("megds", "mcoregb200", "other")
# Ids read by suites of their own (pipesim validate moezoo-qwen3), not by the `other` family.
OWN_SUITE_PREFIXES = ("moezoo-qwen3-235b-",)
# What each suite compares: "tflops" = TFLOP/s per GPU as the source counts them (SC'21 Eq. 3
# with recompute; Megatron-Core without), "tokens" = tokens/s per GPU, "model" = model TFLOP/s
# with causal attention counted exactly, "nemo" = TFLOP/s per GPU by NeMo's formula.
METRIC = {"mcore-h100": "tflops", "nemo2407": "tokens", "llama3-405b": "model", "korthikanti22": "tokens", "bridge2511": "tokens",
          "bridge2604": "tokens", "bridge2606": "tokens", "bridge2608": "tokens", "bridgemem": "tokens",
          "titan2024": "tokens", "automodel": "tokens", "titan2025": "tokens", "titan2412": "tokens",
          "titan2506": "tokens", "sdpa2025": "tokens",
          "mlperf": "tokens", "mlperflora": "tokens", "nemolongseq": "nemo", "dsv3": "tokens",
          "foundry": "tokens"}

# Efficiency sets for `--efficiency`: "preset" = the system presets (kernel curves from published
# kernel benchmarks, pipesim/presets/gpus.py). The per-GPU matmul efficiencies once fitted on
# SC'21 Table 1 are gone: a scalar tuned until a table matches is not a cost model.
EFFICIENCY_SETS = {"preset": {}}


@dataclass
class Case:
    id: str
    suite: str
    target: float | None     # published TFLOP/s per GPU (or tokens/s per GPU: METRIC); None: see load_error
    source: str              # citation
    raw: dict
    memory_gib: float | None = None      # published peak memory per GPU (validation_memory.py)
    memory_kind: str | None = None       # what that figure counts: reserved | allocated
    own_metric: str | None = None        # the `other` family's per-case metric (validation_generic.py)
    origin: str | None = None            # the cases file (a row's `scenario` path is relative to it)
    load_error: str | None = None        # a generic row whose figure could not be read: why (the row's note)

    @property
    def metric(self) -> str:
        return self.own_metric or METRIC.get(self.suite, "tflops")


def load_cases(path=None) -> list[Case]:
    if path is None:
        return _load_file(DEFAULT_FILE) + _load_file(HELDOUT_FILE)
    return _load_file(Path(path))


def read_cases(path) -> list[dict]:
    """The entries of a published-cases file (every suite reads it through here): a list of
    mappings, or a one-line error naming the file (and the line of a YAML error, or the entry)."""
    from pipesim.scenario.safe_yaml import load_text
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"{path}: validation file not found")
    data = load_text(path.read_text(), str(path))
    if not isinstance(data, list):
        raise ScenarioError(f"{path}: expected a list of cases")
    for i, c in enumerate(data):
        if not isinstance(c, dict):
            raise ScenarioError(f"{path}: entry {i + 1}: expected a mapping (id, kind, source, model, parallel, "
                                f"hardware, measured), got {type(c).__name__}")
    return data


def positive_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def measured_value(measured, key: str, where: str, what: str) -> float:
    """measured[key] when it is a positive number, else one line naming it."""
    value = measured.get(key) if isinstance(measured, dict) else None
    if not positive_number(value):
        raise ScenarioError(f"{where}: measured.{key}: expected a positive number ({what}), got {value!r}")
    return value


def _load_file(path: Path) -> list[Case]:
    """The training-throughput cases of a published-cases file whose id starts with a suite's
    prefix (other kinds of entry, e.g. NCCL bus bandwidths, are read by their own suites); a
    malformed entry is a one-line error naming the file, the entry and the key."""
    out = []
    for c in read_cases(path):
        if c.get("kind") != "training_throughput":
            continue
        cid = str(c.get("id", ""))
        suite = next((name for name, (prefix, _) in SUITES.items() if prefix and cid.startswith(prefix)), None)
        if suite is None and cid.startswith(OWN_SUITE_PREFIXES):
            continue
        suite = suite or "other"
        src = c.get("source") if isinstance(c.get("source"), dict) else {}
        measured = c.get("measured")
        own_metric = load_error = None
        if suite in GENERIC_SUITES:         # a new row's figure it cannot read is its own note, not the file's
            from pipesim.whatif.validation_generic import other_target
            try:
                own_metric, value = other_target(c, cid)
            except ScenarioError as exc:
                own_metric, value, load_error = "tokens", None, str(exc)
        else:
            key = {"tokens": "tokens_per_s_per_gpu", "model": "model_tflops_per_gpu"}.get(METRIC.get(suite),
                                                                                         "tflops_per_gpu")
            value = measured_value(measured, key, f"{path}: {cid}", f"the {suite} suite's metric")
        from pipesim.whatif.validation_memory import read_memory
        try:
            memory, kind = read_memory(measured, f"{path}: {cid}") if isinstance(measured, dict) else (None, None)
        except ScenarioError as exc:
            if suite not in GENERIC_SUITES:
                raise
            memory, kind, load_error = None, None, load_error or str(exc)
        out.append(Case(id=cid, suite=suite, target=None if value is None else float(value),
                        source=f"{src.get('ref', '')}, {src.get('where', '')}".strip(", "), raw=c,
                        memory_gib=memory, memory_kind=kind, own_metric=own_metric, origin=str(path),
                        load_error=load_error))
    return out


def case_scenario(case: Case, efficiency: str = "preset") -> dict:
    """The pipesim scenario (file keys) for a published case; `efficiency` picks a set from
    EFFICIENCY_SETS (the system preset's own efficiencies with "preset"). A case without a key its
    family's converter reads, or with a value of the wrong kind, is a one-line error naming it."""
    if efficiency not in EFFICIENCY_SETS:
        raise ScenarioError(f"unknown efficiency set {efficiency!r}; known: {', '.join(EFFICIENCY_SETS)}")
    from pipesim.whatif.families import UnknownModel
    try:
        try:
            scenario = _converted(case, efficiency)
        except UnknownModel:            # a model the family's table lacks: read as any new row
            from pipesim.whatif.validation_generic import generic_scenario
            scenario = generic_scenario(case)
        from pipesim.whatif.published_stack import software_date, with_software_date
        return with_software_date(scenario, software_date(case.raw))
    except KeyError as exc:
        raise ScenarioError(f"{case.id}: missing key {exc} (the {case.suite} converter reads model, "
                            f"parallel, hardware and training)") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ScenarioError(f"{case.id}: a value of the wrong kind for the {case.suite} converter: {exc}") from None


def _converted(case: Case, efficiency: str) -> dict:
    if case.suite == "llama3-405b":
        from pipesim.whatif.validation_cp import llama3_scenario
        return llama3_scenario(case)
    if case.suite == "korthikanti22":
        from pipesim.whatif.validation_heldout import rac22_scenario
        return rac22_scenario(case)
    if case.suite in ("bridge2511", "bridge2604", "bridge2606", "bridge2608", "bridgemem"):
        from pipesim.whatif.validation_bridge import bridge_scenario
        return bridge_scenario(case)
    if case.suite in ("titan2024", "titan2025", "titan2412", "titan2506"):
        from pipesim.whatif.validation_titan import titan_scenario
        return titan_scenario(case)
    if case.suite == "automodel":
        from pipesim.whatif.validation_automodel import automodel_scenario
        return automodel_scenario(case)
    if case.suite in ("mlperf", "mlperflora"):
        from pipesim.whatif.validation_mlperf import mlperf_scenario
        return mlperf_scenario(case)
    if case.suite == "sdpa2025":
        from pipesim.whatif.validation_sdpa import sdpa_scenario
        return sdpa_scenario(case)
    if case.suite == "nemolongseq":
        from pipesim.whatif.validation_longseq import longseq_scenario
        return longseq_scenario(case)
    if case.suite == "dsv3":
        from pipesim.whatif.validation_dsv3 import dsv3_scenario
        return dsv3_scenario(case)
    if case.suite == "foundry":
        from pipesim.whatif.validation_foundry import foundry_scenario
        return foundry_scenario(case)
    if case.suite in GENERIC_SUITES:
        from pipesim.whatif.validation_generic import generic_scenario
        return generic_scenario(case)
    if case.suite in METRIC:
        from pipesim.whatif.families import mcore_scenario, nemo_scenario
        return (mcore_scenario if case.suite == "mcore-h100" else nemo_scenario)(case)
    from pipesim.whatif.validation_sc21 import sc21_scenario
    return sc21_scenario(case, EFFICIENCY_SETS[efficiency])


def predicted_tflops(s, step_time: float) -> float:
    """Narayanan et al. SC'21 Eq. 3 (with recompute) / step / GPUs, in TFLOP/s."""
    from pipesim.costs.summary import megatron_flops
    return megatron_flops(s, recompute=True) / step_time / s.num_gpus / 1e12


@dataclass
class Result:
    case: Case
    predicted: float | None
    error_pct: float | None          # (predicted - published) / published * 100
    step_time_s: float | None
    note: str = ""
    report: dict | None = None
    layout: tuple | None = None      # (t, cp, p, d, v, mb) as simulated; None when the case did not load
    memory_pred_gib: float | None = None      # pipesim's peak memory of the most loaded GPU
    memory_error_pct: float | None = None     # against the published peak (case.memory_gib)


def run_case(case: Case, evaluator: Callable, efficiency: str = "preset") -> Result:
    from pipesim.scenario.load import load_scenario
    if case.load_error:
        return Result(case, None, None, None, note=case.load_error)
    try:
        s = load_scenario(case_scenario(case, efficiency))
        rep = evaluator(s, "representative")
    except PipesimError as exc:
        note = str(exc).splitlines()[0]
        if note.startswith("<dict>: "):         # the converted scenario has no file: name the case
            note = f"{case.id}: {note[len('<dict>: '):]}"
        if "parallel.context" in note or "parallel: context" in note:
            note = "needs context parallelism (parallel.context, issue 15)"
        return Result(case, None, None, None, note=note)
    step = rep["step_time_s"]
    if case.metric == "tokens":
        from pipesim.whatif.families import tokens_per_gpu
        pred = tokens_per_gpu(s, step)
    elif case.metric == "model":
        from pipesim.whatif.validation_cp import model_tflops
        pred = model_tflops(s, step)
    elif case.metric == "nemo":
        from pipesim.whatif.validation_longseq import nemo_llama_flops
        pred = nemo_llama_flops(s) / step / s.num_gpus / 1e12
    elif case.metric == "megatron":
        from pipesim.whatif.validation_generic import megatron_counted_flops
        pred = megatron_counted_flops(s) / step / s.num_gpus / 1e12
    elif case.suite == "mcore-h100":
        from pipesim.costs.summary import megatron_flops
        pred = megatron_flops(s, recompute=False) / step / s.num_gpus / 1e12
    else:
        pred = predicted_tflops(s, step)
    note = "out of memory in pipesim" if rep.get("oom") else ""
    par = s.parallel
    layout = (par.tensor, par.context, par.pipeline, par.data, par.virtual_stages, s.training.micro_batch_size)
    mem = mem_err = None
    if case.memory_gib is not None and rep.get("peak_memory_bytes"):
        from pipesim.whatif.validation_memory import predicted_gib
        mem = predicted_gib(rep)
        mem_err = 100.0 * (mem - case.memory_gib) / case.memory_gib
    return Result(case, pred, 100.0 * (pred - case.target) / case.target, step, note, rep, layout, mem, mem_err)


def run_suite(names=None, evaluator: Callable | None = None, path=None,
              efficiency: str = "preset", jobs: int = 1, progress: Callable | None = None) -> dict[str, list[Result]]:
    """Run the suites' cases; `jobs` > 1 runs them in a process pool (the default evaluator
    only: a custom one may not pickle); `progress(done, total, case_id)` after each case."""
    names = list(names or SUITES)
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise ScenarioError(f"unknown suite {unknown[0]!r}; known: {', '.join(SUITES)}")
    cases = [c for c in load_cases(path) if c.suite in names]
    results: dict[str, Result] = {}
    if jobs > 1 and evaluator is None:
        from concurrent.futures import ProcessPoolExecutor, as_completed
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_run_default, c, efficiency): c for c in cases}
            for fut in as_completed(futures):
                c = futures[fut]
                results[c.id] = fut.result()
                if progress:
                    progress(len(results), len(cases), c.id)
    else:
        if evaluator is None:
            from pipesim.whatif.evaluate import detailed_report as evaluator
        for c in cases:
            results[c.id] = run_case(c, evaluator, efficiency)
            if progress:
                progress(len(results), len(cases), c.id)
    return {n: [results[c.id] for c in cases if c.suite == n] for n in names}


def _run_default(case: Case, efficiency: str) -> Result:
    from pipesim.whatif.evaluate import detailed_report
    return run_case(case, detailed_report, efficiency)


def _errors(results: list[Result]) -> list[float]:
    return [r.error_pct for r in results if r.error_pct is not None]


def mape(results: list[Result]) -> float:
    errs = [abs(e) for e in _errors(results)]
    return sum(errs) / len(errs) if errs else math.nan


def max_error(results: list[Result]) -> float:
    errs = [abs(e) for e in _errors(results)]
    return max(errs) if errs else math.nan


def mean_signed(results: list[Result]) -> float:
    errs = _errors(results)
    return sum(errs) / len(errs) if errs else math.nan


# The bar each family is held to: (MAPE, max |error|, |mean signed error|) in %.
BARS = {"sc21-table1": (5.0, None, None), "sc21-table2": (5.0, None, None),
        "mcore-h100": (8.0, 15.0, 4.0), "nemo2407": (8.0, 15.0, 4.0), "llama3-405b": (10.0, None, None)}
TITLES = {"tflops": "TFLOP/s per GPU, SC'21 Eq. 3 counting recompute",
          "mcore": "model TFLOP/s per GPU, Megatron-LM count (no recompute)",
          "tokens": "tokens/s per GPU",
          "model": "model TFLOP/s per GPU, no recompute, causal attention counted exactly",
          "nemo": "TFLOP/s per GPU as NeMo counts them: no recompute, the whole attention matrix",
          "megatron": "TFLOP/s per GPU as Megatron counts them (SC'21 Eq. 3 for a GPT, Megatron-Core's logger otherwise)"}


def metric_title(suite: str) -> str:
    """What a suite's published figure is, in words."""
    if suite in GENERIC_SUITES:
        return ("each case's own figure: tokens/s per GPU (a step time too, converted), model TFLOP/s or "
                "Megatron's TFLOP/s; pipesim/whatif/validation_generic.py")
    return TITLES["mcore" if suite == "mcore-h100" else METRIC.get(suite, "tflops")]


def case_metric_title(case: Case) -> str:
    """What one case's published figure is: its family's metric, or an `other` case's own."""
    return TITLES[case.metric] if case.suite in GENERIC_SUITES else metric_title(case.suite)


def _cell(value) -> str:
    """A layout figure for the table: as written when it is a number or a word, "-" otherwise (a
    row that did not load may hold anything there)."""
    return str(value) if isinstance(value, (int, float, str)) and len(str(value)) <= 8 else "-"


def format_results(by_suite: dict[str, list[Result]]) -> str:
    lines = []
    for suite, results in by_suite.items():
        if not results:            # a cases file (--cases) without this family
            continue
        lines.append(f"{suite}  ({metric_title(suite)})")
        lines.append(f"  {'case':34s} {'GPUs':>5s} {'t':>2s} {'cp':>2s} {'p':>3s} {'d':>4s} {'v':>3s} {'mb':>3s} "
                     f"{'step s':>8s} {'pred':>7s} {'pub':>7s} {'err %':>7s}")
        for r in results:
            p = r.case.raw.get("parallel") if isinstance(r.case.raw.get("parallel"), dict) else {}
            hw = r.case.raw.get("hardware") if isinstance(r.case.raw.get("hardware"), dict) else {}
            n = hw.get("num_gpus", "-")         # a row that did not load may lack either section
            pred = "-" if r.predicted is None else f"{r.predicted:.1f}"
            err = "-" if r.error_pct is None else f"{r.error_pct:+.1f}"
            step = "-" if r.step_time_s is None else f"{r.step_time_s:.3f}"
            published = "-" if r.case.target is None else f"{r.case.target:.0f}"
            if r.layout is not None:         # what pipesim simulated (a converter may add v, mb)
                tp, cp, pp, dp, v, mb = r.layout
                mb, v = (f"{mb}*", f"{v}†" if v > 1 else v) if suite == "mcore-h100" else (mb, v)
                n = tp * cp * pp * dp if n == "-" else n      # a row naming its scenario states no count
            else:                            # the case did not load: the source's own figures
                tp, cp, pp = p.get("tp", 1), p.get("cp", 1), p.get("pp", 1)
                v = p.get("virtual_stages_per_gpu", p.get("vp", 1))
                mb = str(p.get("micro_batch", p.get("batch_per_replica", p.get("local_batch", "-")))).split()[0]
                # bridge2511 rows publish no dp: derived as GPUs / (tp·pp·cp) where the figures are numbers
                sizes = (n, tp, pp, cp)
                dp = p.get("dp", int(n) // (tp * pp * cp) if all(isinstance(x, int) and x > 0 for x in sizes) else "-")
            note = r.note
            if suite in GENERIC_SUITES and "scenario" not in r.case.raw:     # what the row's stack was read as
                from pipesim.whatif.published_stack import stack_label
                note = "; ".join(x for x in (note, stack_label(r.case.raw)) if x)
            n, tp, cp, pp, dp, v, mb = (_cell(x) for x in (n, tp, cp, pp, dp, v, mb))
            lines.append(f"  {r.case.id:34s} {n:>5} {tp:>2} {cp:>2} {pp:>3} {dp:>4} "
                         f"{v:>3} {mb:>3} {step:>8s} {pred:>7s} {published:>7s} {err:>7s}"
                         + (f"  {note}" if note else ""))
        lines.append("  " + summary_line(suite, results))
        tables = attention_tables(results)
        if tables:
            lines.append("  fused attention: " + "; ".join(f"{label} ({n} rows)" for label, n in tables))
        worst = max((r for r in results if r.error_pct is not None), key=lambda r: abs(r.error_pct), default=None)
        if worst is not None and worst.report:
            lines += ["  " + x for x in error_budget(worst)]
        if suite == "mcore-h100":
            lines.append("  * micro-batch not stated by the source: 1 assumed for every case (families.py)")
            lines.append("  † interleaved, one layer a virtual stage: implied by the README's overlapped pipeline "
                         "communication (families.py)")
        if suite == "llama3-405b":
            from pipesim.whatif.validation_cp import ratio_line
            lines.append("  " + ratio_line(results))
        from pipesim.whatif.validation_memory import format_memory
        lines += format_memory(results)
        lines.append("")
    if len(by_suite) > 1:
        lines += summary_table(by_suite)
    return "\n".join(lines).rstrip()


def attention_tables(results: list[Result]) -> list[tuple[str, int]]:
    """The fused-attention tables a family's rows ran (the report's "attention table", without the
    scale a GPU borrowing another's applies), most rows first: which cuDNN release each row's
    software date picked, or the kernel it names."""
    labels = (((r.report or {}).get("tensor_core_rate") or {}).get("attention_table") for r in results)
    return Counter(label.split(", x ")[0] for label in labels if label).most_common()


# Families whose cases only test: never read while building the model (validation_heldout.py).
HELD_OUT = ("korthikanti22", "bridge2511", "bridge2604", "bridge2606", "bridge2608", "bridgemem", "titan2024",
            "automodel", "titan2025", "titan2412", "titan2506", "sdpa2025", "mlperf", "mlperflora", "nemolongseq",
            "dsv3", "megds", "foundry", "mcoregb200")


def summary_table(by_suite: dict[str, list[Result]]) -> list[str]:
    """Every family on one line: cases run, MAPE, max, mean signed error and its bar."""
    lines = ["summary", f"  {'family':16s} {'cases':>7s} {'MAPE %':>7s} {'max %':>7s} {'bias %':>7s}  bar"]
    for suite, results in by_suite.items():
        if not results:            # a cases file (--cases) without this family
            continue
        m, mx, bias = mape(results), max_error(results), mean_signed(results)
        want = bar_status(suite, results) or ("held out (tests only)" if suite in HELD_OUT else "no bar")
        if suite == "llama3-405b":
            from pipesim.whatif.validation_cp import ratio_line
            want += "; " + ratio_line(results)
        lines.append(f"  {suite:16s} {len(_errors(results)):>3d}/{len(results):<3d} {m:7.1f} {mx:7.1f} {bias:+7.1f}  {want}")
        from pipesim.whatif.validation_memory import memory_summary_line
        memory = memory_summary_line(suite, results, "held out (tests only)" if suite in HELD_OUT else "no bar")
        if memory:
            lines.append(memory)
    return lines


def summary_line(suite: str, results: list[Result]) -> str:
    m, mx, bias = mape(results), max_error(results), mean_signed(results)
    ran = len(_errors(results))
    text = f"MAPE {m:.1f} %, max {mx:.1f} %, mean signed {bias:+.1f} % ({ran} of {len(results)} cases)"
    status = bar_status(suite, results)
    return text + (f"  (target {status})" if status else "")


def bar_status(suite: str, results: list[Result]) -> str | None:
    """'MAPE <= 8, max <= 15, |bias| <= 4 %: met' (or MISSED) for a family with a bar, else None."""
    bar = BARS.get(suite)
    if not bar:
        return None
    m, mx, bias = mape(results), max_error(results), mean_signed(results)
    checks = [m <= bar[0]] + ([mx <= bar[1]] if bar[1] else []) + ([abs(bias) <= bar[2]] if bar[2] else [])
    want = f"MAPE <= {bar[0]:.0f}" + (f", max <= {bar[1]:.0f}" if bar[1] else "") + (
        f", |bias| <= {bar[2]:.0f}" if bar[2] else "")
    return f"{want} %: {'met' if all(checks) else 'MISSED'}"


def error_budget(r: Result) -> list[str]:
    """Where the worst case's predicted step time goes, and how far it is from the step that
    would reproduce the published figure: the terms large enough to explain the gap alone."""
    rep, step = r.report, r.step_time_s
    if not rep.get("ranks"):           # the closed form (--engine analytic) has no per-rank terms
        return []
    # throughput metrics: the published figure implies step * pred / pub
    gap = step - step * r.predicted / r.case.target
    rank = rep["ranks"][0]
    terms = {}
    srcs = rep.get("cost_sources") or {}
    total_src = sum(srcs.values()) or 1.0
    lost = rank.get("compute_contention_s", 0.0)       # compute stretched beside DP collectives
    busy = rank["compute_busy_s"] - lost
    steps = {}
    mine = set(rank.get("stages", ()))      # the step ops of rank 0's own model stages only
    for c in rep.get("stage_costs", []):
        if mine and c.get("stage") not in mine:
            continue
        for name, sec in (c.get("step_ops") or {}).items():
            steps[name] = steps.get(name, 0.0) + sec
    step_total = sum(steps.values())
    for src, sec in srcs.items():
        terms[f"compute: {src}"] = (busy - step_total) * sec / total_src
    for name, sec in steps.items():
        terms[f"step op: {name}"] = sec
    terms["compute beside DP collectives"] = lost
    for kind, sec in (rep.get("exposed_comm_s") or {}).items():
        terms[f"exposed comm: {kind}"] = sec
    terms["pipeline bubble / idle"] = max(0.0, step - busy - lost - sum((rep.get("exposed_comm_s") or {}).values()))
    out = [f"error budget of the worst case {r.case.id} ({r.error_pct:+.1f} %): predicted step {step:.3f} s, "
           f"the published figure implies {step - gap:.3f} s ({-gap:+.3f} s)"]
    for name, sec in sorted(terms.items(), key=lambda kv: -kv[1]):
        if sec <= 0:
            continue
        flag = "  <- alone could explain the gap" if sec >= abs(gap) and gap > 0 else ""
        out.append(f"  {name:34s} {sec:8.3f} s  {100 * sec / step:5.1f} %{flag}")
    return out


def plot_validation(by_suite: dict[str, list[Result]], path) -> None:
    """Signed error of every case, one column per family (families compare different metrics:
    TFLOP/s or tokens/s), with the ±5 % and ±10 % bands."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    names = list(by_suite)
    for k, suite in enumerate(names):
        errs = [r.error_pct for r in by_suite[suite] if r.error_pct is not None]
        xs = [k + 0.5 * (i / max(1, len(errs) - 1) - 0.5) for i in range(len(errs))]
        ax.scatter(xs, errs, s=22, marker="osd^v"[k % 5], zorder=3,
                   label=f"{suite}: MAPE {mape(by_suite[suite]):.1f} %, bias {mean_signed(by_suite[suite]):+.1f} %")
    for f, style in ((5, ":"), (10, "--")):
        for sign in (1, -1):
            ax.axhline(sign * f, color="k", ls=style, lw=0.7)
    ax.axhline(0, color="k", lw=1)
    ax.set_xticks(range(len(names)), names, fontsize=8, rotation=20, ha="right")
    ax.set_ylabel("pipesim vs published, % (+ = optimistic)")
    ax.set_title("validation: signed error per case (dotted ±5 %, dashed ±10 %)")
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_scenarios(directory, path=None, efficiency: str = "preset", suites=None) -> list[Path]:
    """Write each case of `suites` (default: all) as a scenario YAML with its citation and its
    published figure as a header comment; the MoE family's cases too (moezoo-qwen3)."""
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    footer = "# generated by `pipesim validate --write-scenarios`\n"
    written = []

    def write(cid: str, header: str, scenario: dict) -> None:
        target = out_dir / f"{cid}.yaml"
        target.write_text(header + footer + yaml.safe_dump(scenario, sort_keys=False))
        written.append(target)
    for case in load_cases(path):
        if not suites or case.suite in suites:
            try:
                scenario = case_scenario(case, efficiency)
            except ScenarioError as exc:
                if "skipped:" in str(exc):          # a row pipesim cannot express (validate lists it)
                    continue
                raise
            published = case.load_error if case.target is None else f"{case.target:g} ({case_metric_title(case)})"
            write(case.id, f"# {case.id}: {case.source}\n# published: {published}\n", scenario)
    if not suites or "moezoo-qwen3" in suites:
        from pipesim.whatif.validation_moe import load_moe_cases, moe_case_scenario
        for c in load_moe_cases(path):
            step = (c.get("measured") or {}).get("iteration_time_s", "not published")
            write(c["id"], f"# {c['id']}: {c['source']['ref']}\n# published: step time {step} s\n",
                  moe_case_scenario(c))
    return written


# ---- ZeRO-3 diagnosis (Table 2) -----------------------------------------------------------
# What pipesim does today: ZeRO-3 parameter gathers and gradient reduce-scatters as one bulk,
# bandwidth-bound collective per pass on the best algorithm (hierarchical, 8 NICs per node), and
# the gathered model kept as a buffer (OOM at 175B). What DeepSpeed ZeRO-3 did in 2021: one
# collective per parameter tensor (12 per transformer layer: QKV, projection, two MLP matrices
# with their biases, two LayerNorms' scale and shift) on the flat data-parallel communicator,
# so each collective pays the ring latency (N-1)·α (Thakur et al. 2005 ring all-gather), with
# little overlap. The proposal below adds exactly that term to the closed-form model, not
# overlapped, to test whether it explains the published numbers.
TENSORS_PER_LAYER = 12


def zero3_per_tensor_report(s, mode: str = "representative", alpha: float | None = None) -> dict:
    """Closed-form step with ZeRO-3 collectives per parameter tensor: 2 all-gathers (forward,
    backward) + 1 reduce-scatter per tensor per micro-batch, each (N-1)·α + bandwidth term.
    α defaults to the system's inter-node latency (`system.inter_node.latency_us`)."""
    if alpha is None:
        alpha = s.system.inter_node.latency
    from pipesim.costs.collectives import collective_time
    from pipesim.costs.topology import placement
    from pipesim.whatif.analytic import analytic_report
    rep = analytic_report(s)
    if s.training.zero_stage < 3 or s.parallel.data <= 1:
        return rep
    from pipesim.costs.stage import stage_costs
    n, M = s.parallel.data, s.num_microbatches
    grad = sum(st.grad_bytes for st in stage_costs(s))
    group = placement(s, "dp")
    band = 2 * collective_time("all_gather", grad, group) + collective_time("reduce_scatter", grad, group)
    lat = 3 * TENSORS_PER_LAYER * s.model.num_layers * (n - 1) * alpha
    step = rep["compute_s"] + rep["pipeline_bubble_s"] + rep["optimizer_s"] + M * (band + lat)
    return dict(rep, step_time_s=step, dp_comm_exposed_s=M * (band + lat), zero3_latency_s=M * lat)
