"""Read a scenario (YAML file or dict), apply presets and `--set` overrides, validate strictly."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterable

from pipesim.errors import ScenarioError
from pipesim.presets.models import MODELS
from pipesim.presets.systems import SYSTEMS
from pipesim.scenario.checks import check_scenario
from pipesim.scenario.hf_config import from_hf_config
from pipesim.scenario.config import CostsConfig, ModelConfig, ParallelConfig, Scenario, TrainingConfig
from pipesim.scenario.run_config import RunConfig
from pipesim.scenario.safe_yaml import load_text
from pipesim.scenario.schema import Loader, merge
from pipesim.scenario.stage_split import embedding_loss_split, layout_split
from pipesim.scenario.system_config import SystemConfig

SECTIONS = {"model": ModelConfig, "system": SystemConfig, "parallel": ParallelConfig,
            "training": TrainingConfig, "costs": CostsConfig, "run": RunConfig}
REQUIRED = ("model", "system", "training")
# Sanity ranges: far beyond any published model or cluster (the largest runs: ~100k GPUs, 1M-token
# context, 256k vocabularies, a few hundred layers), yet small enough that every size the
# simulator derives from them fits in memory. A value outside is a typo, refused before any work.
LIMITS = {
    "model.num_layers": (0, 10_000),
    "model.hidden_size": (0, 1_000_000),
    "model.num_attention_heads": (0, 100_000),
    "model.num_kv_heads": (1, 100_000),
    "model.ffn_hidden_size": (1, 10_000_000),
    "model.seq_length": (0, 100_000_000),
    "model.vocab_size": (0, 100_000_000),
    "model.num_classes": (1, 10_000_000),
    "model.extra_params": (0, 1e15),
    "system.num_nodes": (1, 1_000_000),
    "system.gpus_per_node": (1, 100_000),
    "parallel.tensor": (1, 1_000_000),
    "parallel.pipeline": (1, 10_000),
    "parallel.data": (1, 10_000_000),
    "parallel.virtual_stages": (1, 1_000),
    "parallel.tensor_depth": (1, 1_000),
    "parallel.layers_per_stage": (0, 10_000),
    "training.micro_batch_size": (1, 10_000_000),
    "training.global_batch_size": (1, 1e12),
    "training.microbatch_group_size": (1, 1e12),
    "training.zero_stage": (0, 3),
    "training.zero_replicas": (1, 10_000_000),
    "training.bf16_layers_start": (0, 100_000),
    "training.bf16_layers_end": (0, 100_000),
    # packed documents: a token up to a billion; the length spread up to 100x the mean
    "training.document_length": (1, 1e9),
    "training.document_length_cv": (0, 100),
    # DP buckets: Megatron/PyTorch DDP use 25-40 MB; below 1 kB the bucket count explodes.
    "training.grad_bucket_MB": (0.001, 1e6),
    # a run: up to a billion times today's 15T-token runs; interruptions up to one per GPU-minute
    "run.tokens": (1, 1e22),
    "run.interruptions_per_1000_gpu_days": (0, 1.5e6),
    "run.restart_min": (0, 1e6),
}
MAX_PRESET_FILES = 8         # a preset file may name another preset file, this deep at most


def load_scenario(path_or_dict, overrides: Iterable[str] = ()) -> Scenario:
    """Load and validate a scenario. `overrides` are `a.b=v` strings (v parsed as YAML)."""
    if isinstance(path_or_dict, Scenario):
        raw, source, base = scenario_to_dict(path_or_dict), path_or_dict.source, Path.cwd()
    elif isinstance(path_or_dict, dict):
        raw, source, base = path_or_dict, "<dict>", Path.cwd()
    else:
        path = Path(path_or_dict)
        raw, source, base = read_yaml(path), str(path), path.parent
    for text in overrides:
        raw = apply_override(raw, text)
    return build_scenario(raw, source, base)


def read_yaml(path: Path) -> dict:
    if not path.exists():
        raise ScenarioError(f"{path}: file not found")
    if path.is_dir():
        raise ScenarioError(f"{path}: is a directory, expected a scenario YAML file")
    try:
        data = load_text(path.read_text(), str(path))
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
    if data is None:
        raise ScenarioError(f"{path}: line 1: the file is empty; expected sections {', '.join(SECTIONS)}")
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: line 1: expected a mapping with sections {', '.join(SECTIONS)}, "
                            f"got {type(data).__name__}")
    return data


def apply_override(raw: dict, text: str) -> dict:
    if "=" not in text:
        raise ScenarioError(f"--set {text}: expected KEY.PATH=VALUE, e.g. parallel.tensor=4")
    key, value_text = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ScenarioError(f"--set {text}: empty key")
    value = load_text(value_text, f"--set {key.strip()}")     # YAML 1.2: 1e-9 is a number
    if parts[0] not in SECTIONS:
        raise ScenarioError(f"--set {text}: unknown section {parts[0]!r}; valid: {', '.join(SECTIONS)}")
    update = value
    for p in reversed(parts):
        update = {p: update}
    section = raw.get(parts[0])
    if isinstance(section, str) and len(parts) > 1:      # `model: gpt2-small` then --set model.x=...
        raw = dict(raw, **{parts[0]: {"preset": section}})
    return merge(raw, update)


def read_sections(raw: dict, source: str, base: Path) -> tuple:
    """(loader, model, system, training, costs, run): the sections a scenario keeps whatever its
    layout, each read as the loader reads it (unknown or missing sections, wrong types and values
    out of range are one-line errors naming the key). `pipesim search`, which replaces the layout,
    checks its base with this alone."""
    loader = Loader(source, LIMITS)
    unknown = [k for k in raw if k not in SECTIONS]
    if unknown:
        loader.fail(unknown[0], f"unknown section; valid sections: {', '.join(SECTIONS)}")
    for name in REQUIRED:
        if name not in raw:
            loader.fail(name, f"missing section (a scenario needs {', '.join(REQUIRED)})")
    model = loader.build(ModelConfig, resolve_model(raw["model"], loader, base), "model")
    system = loader.build(SystemConfig, resolve_preset(raw["system"], SYSTEMS, "system", loader, base), "system")
    training = loader.build(TrainingConfig, raw["training"], "training")
    training = (_fused_latent_attention(training, raw["training"], model, loader) if model.is_mla
                else _default_attention(training, system))
    costs = loader.build(CostsConfig, raw.get("costs") or {}, "costs")
    costs = dataclasses.replace(costs, profile=_resolve(costs.profile, base))
    run = loader.build(RunConfig, raw.get("run") or {}, "run")
    return loader, model, system, resolve_paths(training, base), costs, run


def build_scenario(raw: dict, source: str, base: Path) -> Scenario:
    loader, model, system, training, costs, run = read_sections(raw, source, base)
    parallel = loader.build(ParallelConfig, _auto_split(raw.get("parallel") or {}, model, loader), "parallel")
    parallel = resolve_data(parallel, system, loader)
    scenario = Scenario(model=model, system=system, parallel=parallel, training=training, costs=costs,
                        run=run, source=source)
    check_scenario(scenario, loader)
    return scenario


def _auto_split(section, model, loader: Loader):
    """`parallel.layers_per_stage: auto`: Megatron-Core's --account-for-embedding/loss-in-pipeline-
    split over pipeline x virtual_stages chunks; a Megatron layout string (--pipeline-model-parallel-
    layout, e.g. "Et*4|(t*4|)*14tmL"): its layers per chunk (pipesim/scenario/stage_split.py)."""
    given = section.get("layers_per_stage") if isinstance(section, dict) else None
    if not isinstance(given, str):
        return section
    p, v = section.get("pipeline", 1), section.get("virtual_stages", 1)
    if not (isinstance(p, int) and isinstance(v, int) and p >= 1 and v >= 1):
        return dict(section, layers_per_stage=None)        # the loader names the bad size
    if given != "auto":
        try:
            return dict(section, layers_per_stage=layout_split(given, model.num_layers, model.mtp_layers, p * v))
        except ValueError as exc:
            loader.fail("parallel.layers_per_stage", f"layout {given[:60]!r}: {exc}")
    split = embedding_loss_split(model.num_layers, p * v)
    if not split:
        loader.fail("parallel.layers_per_stage", f"auto: num_layers({model.num_layers}) + the embedding and the "
                    f"loss give fewer slots than pipeline({p})·virtual_stages({v}) = {p * v} chunks")
    return dict(section, layers_per_stage=split)


def _fused_latent_attention(training, given, model, loader: Loader):
    """MLA and DSA run fused kernels (Megatron-Core: Transformer Engine's fused attention; DSA's
    sparse kernels) and are costed so: attention defaults to flash for them, and eager (the
    materialized s x s scores) is refused rather than costed as something it is not."""
    if isinstance(given, dict) and given.get("attention", "auto") == "eager":
        loader.fail("training.attention", f"eager: attention_variant {model.attention_variant} "
                    f"is modelled with a fused kernel only; use flash")
    return dataclasses.replace(training, attention="flash")


def _default_attention(training, system):
    """`attention: auto`: what a 2024+ stack runs. Transformer Engine and PyTorch's
    scaled_dot_product_attention pick a fused kernel for 16-bit inputs on every GPU with one
    (FlashAttention / cuDNN from Ampere on, the memory-efficient kernel on Volta; each GPU's kernel
    curve carries its table, presets/gpus.py); FP32 and TF32 training and CPU ranks run the
    materialized softmax (eager)."""
    if training.attention != "auto":
        return training
    fused = system.gpu.kernel_curve is not None and training.precision in ("fp16", "bf16", "fp8")
    return dataclasses.replace(training, attention="flash" if fused else "eager")


def resolve_preset(section, presets: dict, name: str, loader: Loader, base: Path | None = None,
                   _files: tuple = ()) -> dict:
    """`section` is a preset name, or a mapping with optional `preset:` plus field overrides.
    A preset ending in .yaml/.yml is a file (relative to the scenario) holding the section."""
    if isinstance(section, str):
        section = {"preset": section}
    if not isinstance(section, dict):
        loader.fail(name, f"expected a preset name ({', '.join(sorted(presets))}) or a mapping, "
                    f"got {type(section).__name__}")
    section = dict(section)
    preset = section.pop("preset", None)
    if preset is None:
        return section
    if not isinstance(preset, str):
        loader.fail(f"{name}.preset", f"expected a preset name ({', '.join(sorted(presets))}) or a path to "
                    f"a .yaml file, got {type(preset).__name__}")
    if preset.endswith((".yaml", ".yml")):
        path = Path(_resolve(preset, base or Path.cwd()))
        if not path.is_file():
            loader.fail(f"{name}.preset", f"preset file not found: {path}")
        if path.resolve() in _files or len(_files) >= MAX_PRESET_FILES:
            loader.fail(f"{name}.preset", "preset files refer to each other in a loop: "
                        + " -> ".join(str(f) for f in _files + (path,)))
        inner = read_yaml(path)
        return merge(resolve_preset(inner, presets, name, Loader(str(path)), path.parent,
                                    _files + (path.resolve(),)), section)
    if preset not in presets:
        loader.fail(f"{name}.preset", f"unknown preset {preset[:60]!r}; known: {', '.join(sorted(presets))}")
    return merge(dict(presets[preset], name=preset), section)


def resolve_model(section, loader: Loader, base: Path) -> dict:
    if isinstance(section, dict) and "hf_config" in section:
        section = dict(section)
        hf = section.pop("hf_config")
        if not isinstance(hf, str):
            loader.fail("model.hf_config", f"expected a path to a config.json, got {type(hf).__name__}")
        path = Path(_resolve(hf, base))
        return merge(from_hf_config(path, loader), section)
    return resolve_preset(section, MODELS, "model", loader, base)


def resolve_data(parallel: ParallelConfig, system: SystemConfig, loader: Loader) -> ParallelConfig:
    t, c, p, gpus = parallel.tensor, parallel.context, parallel.pipeline, system.num_gpus
    # tensor·context·pipeline·data = GPUs (context shown only when used, as in the contract's example)
    names = [f"tensor({t})"] + ([f"context({c})"] if c > 1 else []) + [f"pipeline({p})"]
    if parallel.data is None:
        if gpus % (t * c * p):
            loader.fail("parallel", f"{'·'.join(names)} = {t * c * p} does not divide "
                        f"{gpus} GPUs (num_nodes({system.num_nodes})·gpus_per_node({system.gpus_per_node}))")
        return dataclasses.replace(parallel, data=gpus // (t * c * p))
    d = parallel.data
    if t * c * p * d != gpus:
        loader.fail("parallel", f"{'·'.join(names + [f'data({d})'])} = {t * c * p * d} ≠ {gpus} GPUs "
                    f"(num_nodes({system.num_nodes})·gpus_per_node({system.gpus_per_node}))")
    return parallel


def resolve_paths(training: TrainingConfig, base: Path) -> TrainingConfig:
    """A schedule CSV's path from the scenario's folder; a registry schedule by its canonical name
    (`Interleaved-1F1B` is `interleaved`), which the closed form and the checks compare against.
    An unknown name is left for the checks to refuse."""
    if training.schedule.endswith(".csv"):
        return dataclasses.replace(training, schedule=_resolve(training.schedule, base))
    from pipesim.schedules.registry import SCHEDULES, canonical
    if training.schedule in SCHEDULES and canonical(training.schedule) != training.schedule:
        return dataclasses.replace(training, schedule=canonical(training.schedule))
    return training


# The keys a scenario may give as a file path relative to itself (resolved against its folder
# above): a preset file, a Hugging Face config.json, an action CSV, a cost profile.
FILE_KEYS = (("model", "preset"), ("model", "hf_config"), ("system", "preset"), ("training", "schedule"),
             ("costs", "profile"))


def absolute_files(raw: dict, base: Path) -> dict:
    """`raw` with the files it names relative to `base` made absolute, so the dict loads from any
    folder as the file it came from does (a section given as a preset name alone counts too)."""
    out = dict(raw)
    for section_name, key in FILE_KEYS:
        section = out.get(section_name)
        if isinstance(section, str) and key == "preset":
            section = {"preset": section}
        value = section.get(key) if isinstance(section, dict) else None
        if isinstance(value, str) and (base / value).is_file():
            out[section_name] = dict(section, **{key: _resolve(value, base)})
    return out


def _resolve(path: str | None, base: Path) -> str | None:
    if path is None or os.path.isabs(path):
        return path
    return str((base / path))


def scenario_to_dict(s: Scenario) -> dict:
    """Back to file keys and file units (inverse of the loader), for sweeps and reports."""
    def convert(obj):
        if dataclasses.is_dataclass(obj):
            out = {}
            for f in dataclasses.fields(obj):
                if f.name == "source":
                    continue
                value = getattr(obj, f.name)
                scale = f.metadata.get("scale", 1.0)
                if scale != 1.0 and value is not None:
                    value = ({k: v / scale for k, v in value.items()} if isinstance(value, dict)
                             else value / scale)
                key = f.metadata.get("key") or f.name
                out[key] = convert(value)
            return out
        if isinstance(obj, tuple):
            return [convert(x) for x in obj]
        if isinstance(obj, dict):
            return {k: convert(v) for k, v in obj.items()}
        return obj
    return convert(s)

