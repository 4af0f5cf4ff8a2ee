"""Malformed scenarios: each gives one clear line on stderr and exit code 2, never a traceback."""
import subprocess
import sys

import pytest

from pipesim.cli import main

GOOD = """
model: {preset: gpt2-small}
system: {preset: dgx-a100-80gb}
parallel: {tensor: 2, pipeline: 2, data: 2}
training: {micro_batch_size: 2, global_batch_size: 32}
"""

CASES = [
    ("unknown top-level section", GOOD + "extra: 1\n", ["extra", "unknown section"]),
    ("unknown key lists valid keys", GOOD.replace("tensor: 2,", "tensr: 2, tensor: 2,"),
     ["parallel.tensr", "unknown key", "tensor", "pipeline"]),
    ("nested unknown key", GOOD.replace("{preset: dgx-a100-80gb}", "{preset: dgx-a100-80gb, gpu: {hbm: 3}}"),
     ["system.gpu.hbm", "hbm_bandwidth_GBps"]),
    ("wrong type", GOOD.replace("tensor: 2,", "tensor: two,"), ["parallel.tensor", "expected an integer"]),
    ("unit in the value", GOOD.replace("{preset: dgx-a100-80gb}", "{preset: dgx-a100-80gb, gpu: {memory_GiB: 80GB}}"),
     ["system.gpu.memory_GiB", "expected a number", "units belong in the key name"]),
    ("bad choice", GOOD.replace("global_batch_size: 32", "global_batch_size: 32, recompute: some"),
     ["training.recompute", "none", "selective", "full"]),
    ("layout does not match GPUs", GOOD.replace("data: 2", "data: 4"),
     ["tensor(2)·pipeline(2)·data(4) = 16 ≠ 8 GPUs"]),
    ("heads not divisible by tensor", GOOD.replace("tensor: 2, pipeline: 2, data: 2", "tensor: 8, pipeline: 1, data: 1"),
     ["num_attention_heads(12)", "tensor split (8)"]),
    ("batch not divisible", GOOD.replace("global_batch_size: 32", "global_batch_size: 30"),
     ["global_batch_size(30)", "micro_batch_size(2)·data(2) = 4"]),
    ("layers not divisible by stages", GOOD.replace("tensor: 2, pipeline: 2, data: 2", "tensor: 1, pipeline: 8, data: 1")
     .replace("gpt2-small", "gpt2-medium").replace("{preset: gpt2-medium}", "{preset: gpt2-medium, num_layers: 30}"),
     ["num_layers(30)", "pipeline(8)"]),
    ("unknown preset", GOOD.replace("gpt2-small", "gpt5"), ["model.preset", "gpt5", "gpt2-small"]),
    ("negative bandwidth", GOOD.replace("{preset: dgx-a100-80gb}",
                                        "{preset: dgx-a100-80gb, intra_node: {bandwidth_GBps: -1}}"),
     ["system.intra_node", "bandwidth_GBps must be positive"]),
    ("negative optional peak", GOOD.replace("{preset: dgx-a100-80gb}",
                                            "{preset: dgx-a100-80gb, gpu: {peak_tflops_bf16: -5}}"),
     ["system.gpu", "peak_tflops_bf16 must be positive (or left out), got -5"]),
    ("zero FP8 peak", GOOD.replace("{preset: dgx-a100-80gb}", "{preset: dgx-h100, gpu: {peak_tflops_fp8: 0}}"),
     ["system.gpu", "peak_tflops_fp8 must be positive"]),
    ("missing section", "model: {preset: gpt2-small}\nsystem: dgx-h100\n", ["training", "missing section"]),
    ("missing required key", GOOD.replace("global_batch_size: 32", "micro_batch_size: 2").replace(
        "{micro_batch_size: 2, micro_batch_size: 2}", "{micro_batch_size: 2}"), ["training.global_batch_size"]),
    ("empty file", "", ["file is empty"]),
    ("yaml syntax error", "model: {preset: gpt2-small\nsystem: [\n", ["YAML syntax error", "line"]),
    ("not a mapping", "- 1\n- 2\n", ["expected a mapping"]),
    ("missing profile", GOOD + "costs: {profile: nowhere.json}\n", ["costs.profile", "not found"]),
    ("2d needs a square", GOOD.replace("tensor: 2, pipeline: 2, data: 2",
                                       "tensor: 2, pipeline: 2, data: 2, tensor_mode: 2d"), ["not q·q"]),
    ("kept weights need ZeRO-3", GOOD.replace("global_batch_size: 32",
                                              "global_batch_size: 32, zero_stage: 1, reshard_after_forward: false"),
     ["training.reshard_after_forward", "ZeRO-3", "zero_stage: 1"]),
    ("ZeRO-3 collective unit", GOOD.replace("global_batch_size: 32", "global_batch_size: 32, zero3_collectives: block"),
     ["training.zero3_collectives", "tensor", "layer"]),
    ("per-layer gathers need ZeRO-3", GOOD.replace("global_batch_size: 32",
                                                   "global_batch_size: 32, zero3_collectives: layer"),
     ["training.zero3_collectives", "ZeRO-3", "zero_stage: 0"]),
    ("FSDP2 copies need ZeRO-3", GOOD.replace("global_batch_size: 32",
                                              "global_batch_size: 32, zero3_collectives: fsdp2"),
     ["training.zero3_collectives", "ZeRO-3", "zero_stage: 0"]),
    ("blocking P2P is Megatron's exchange", GOOD.replace("global_batch_size: 32",
                                                         "global_batch_size: 32, schedule: zb-v, p2p_sync: true")
     .replace("pipeline: 2, data: 2", "pipeline: 2, data: 2, virtual_stages: 2"),
     ["training.p2p_sync", "gpipe, 1f1b, interleaved", "zb-v"]),
    ("compression bits", GOOD.replace("global_batch_size: 32", "global_batch_size: 32, activation_compression_bits: 7"),
     ["activation_compression_bits must be 16, 12, 8 or 4"]),
]


@pytest.mark.parametrize("name,text,needles", CASES, ids=[c[0] for c in CASES])
def test_malformed_scenario(tmp_path, capsys, name, text, needles):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(path) in err
    for needle in needles:
        assert needle in err, (needle, err)


def test_missing_file(capsys):
    assert main(["estimate", "/nonexistent/scenario.yaml"]) == 2
    assert "file not found" in capsys.readouterr().err


def test_bad_override(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    assert main(["estimate", str(path), "--set", "parallel.tensr=4"]) == 2
    assert "parallel.tensr" in capsys.readouterr().err
    assert main(["estimate", str(path), "--set", "nonsense"]) == 2
    assert "KEY.PATH=VALUE" in capsys.readouterr().err


def test_cli_process_has_no_traceback(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("tensor: 2,", "tensor: [1],"))
    proc = subprocess.run([sys.executable, "-m", "pipesim", "estimate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "parallel.tensor" in proc.stderr


# Hostile inputs found by benchmarks/fuzz_scenarios.py (issue 18): each is one line naming the key
# path or the line/column, never a traceback, and refused before any large allocation.
HOSTILE = [
    ("preset is a mapping", GOOD.replace("{preset: gpt2-small}", "{preset: {}}"), ["model.preset", "got dict"]),
    ("preset is a list", GOOD.replace("{preset: dgx-a100-80gb}", "{preset: []}"), ["system.preset", "got list"]),
    ("section is a number", GOOD.replace("{preset: gpt2-small}", "5"), ["model", "got int"]),
    ("float where an integer goes", GOOD.replace("{preset: gpt2-small}", "{preset: gpt2-small, num_layers: 1.0e+30}"),
     ["model.num_layers", "expected an integer"]),
    ("absurd layer count", GOOD.replace("{preset: gpt2-small}", "{preset: gpt2-small, num_layers: 100000}"),
     ["model.num_layers", "out of range", "10000"]),
    ("tiny DP bucket", GOOD.replace("global_batch_size: 32", "global_batch_size: 32, grad_bucket_MB: 1e-9"),
     ["training.grad_bucket_MB", "out of range"]),
    ("NaN", GOOD.replace("global_batch_size: 32", "global_batch_size: 32, grad_bucket_MB: .nan"),
     ["training.grad_bucket_MB", "finite"]),
    ("5000-digit integer", GOOD.replace("global_batch_size: 32", "global_batch_size: " + "9" * 5000),
     ["line 5", "5000 digits"]),
    ("huge integer", GOOD.replace("global_batch_size: 32", "global_batch_size: " + "9" * 25),
     ["training.global_batch_size", "2**53"]),
    ("deep nesting", GOOD + "extra: " + "[" * 500 + "]" * 500 + "\n", ["nesting deeper", "line 6"]),
    ("anchor bomb", GOOD + "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)), ["anchors", "line"]),
    ("missing preset file", GOOD.replace("{preset: dgx-a100-80gb}", "{preset: nowhere.yaml}"),
     ["system.preset", "preset file not found"]),
    ("too many micro-batches", GOOD.replace("global_batch_size: 32", "global_batch_size: 4000000000"),
     ["training.global_batch_size", "pipeline actions"]),
]


@pytest.mark.parametrize("name,text,needles", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_scenario(tmp_path, capsys, name, text, needles):
    test_malformed_scenario(tmp_path, capsys, name, text, needles)


def test_set_reads_yaml_12_numbers(tmp_path):
    from pipesim import load_scenario
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    s = load_scenario(path, ["training.grad_bucket_MB=1e-2", "model.seq_length=1e3"])
    assert s.training.grad_bucket_MB == 0.01 and s.model.seq_length == 1000


def test_schedule_constraint_names_the_keys(tmp_path, capsys):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    assert main(["simulate", str(path), "--no-files", "--no-why", "--set", "training.schedule=zb-v"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    for needle in (str(path), "training.schedule", "parallel.virtual_stages(1)", "parallel.pipeline(2)"):
        assert needle in err, (needle, err)


def test_preset_file_loop(tmp_path, capsys):
    (tmp_path / "loop.yaml").write_text("preset: loop.yaml\n")
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("{preset: dgx-a100-80gb}", "{preset: loop.yaml}"))
    assert main(["estimate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "system.preset" in err and "loop" in err and len(err.splitlines()) == 1
