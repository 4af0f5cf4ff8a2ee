"""`--scale`: shrink a scenario's model so it runs on a small machine (same structure, fewer
and narrower layers, shorter sequences, smaller vocabulary).

Spec: one factor for all four ("0.25") or per dimension ("width=0.25,depth=0.5,seq=0.125,vocab=0.01").
Width keeps the head dimension and scales the number of heads (rounded to a multiple of the
tensor-parallel size); depth keeps at least one layer per model stage; the result is an ordinary
scenario, so the simulator can predict exactly what the emulator runs.
"""
from __future__ import annotations

from pipesim.errors import ScenarioError

KEYS = ("width", "depth", "seq", "vocab")


def parse_scale(text: str | None) -> dict[str, float]:
    if not text:
        return {}
    try:
        if "=" not in text:
            f = float(text)
            out = dict.fromkeys(KEYS, f)
        else:
            out = {}
            for part in text.split(","):
                k, _, v = part.partition("=")
                k = k.strip()
                if k not in KEYS:
                    raise ScenarioError(f"--scale {text!r}: unknown key {k!r}; keys are {', '.join(KEYS)}")
                out[k] = float(v)
    except ValueError:
        raise ScenarioError(f"--scale {text!r}: expected a number like 0.25 or keys like width=0.25,depth=0.5") from None
    for k, f in out.items():
        if not 0 < f <= 1:
            raise ScenarioError(f"--scale {text!r}: {k} factor must be in (0, 1], got {f}")
    return out


def _multiple(x: float, of: int, least: int) -> int:
    return max(least, of * max(1, round(x / of)))


def scale_scenario(s, spec: str | None):
    """A new Scenario with the model shrunk per `spec` (the same one when spec is empty)."""
    factors = parse_scale(spec)
    if not factors:
        return s
    from pipesim.scenario.load import load_scenario, scenario_to_dict
    raw = scenario_to_dict(s)
    m = raw["model"]
    T = s.parallel.tensor
    n_stages = s.num_model_stages
    model = s.model
    if "width" in factors:
        w = factors["width"]
        d = model.head_dim
        heads = _multiple(model.num_attention_heads * w, T, T)
        kv = _multiple(model.kv_heads * heads / model.num_attention_heads, T, T)
        while heads % kv:
            kv -= T
        m["num_attention_heads"], m["num_kv_heads"] = heads, kv
        m["hidden_size"] = heads * d
        m["ffn_hidden_size"] = _multiple(model.ffn * heads * d / model.hidden_size, T, T)
    if "depth" in factors:
        m["num_layers"] = _multiple(model.num_layers * factors["depth"], n_stages, n_stages)
        raw["parallel"]["layers_per_stage"] = None
    if "seq" in factors:
        m["seq_length"] = max(8, round(model.seq_length * factors["seq"]))
    if "vocab" in factors:
        m["vocab_size"] = _multiple(model.vocab_size * factors["vocab"], 8 * T, 8 * T)
    m["reference_params"] = None
    m["name"] = f"{model.name}-scaled"
    return load_scenario(_drop_none(raw))


def _drop_none(d):
    if isinstance(d, dict):
        return {k: _drop_none(v) for k, v in d.items() if v is not None}
    return d
