"""Reference cross-check (seed 002's own-pipeline vs torchgpipe): the same model and batch under
torch.distributed.pipelining's ScheduleGPipe / Schedule1F1B and under the emulator's gpipe / 1f1b
plans give the same losses over three optimizer steps and the same counted peak memory."""
import os

import pytest

pytest.importorskip("torch")
from pipesim.emulator import torch_pipelining  # noqa: E402
from pipesim.emulator.reference import torch_pipelining_run  # noqa: E402

if not torch_pipelining.available():
    pytest.skip("torch.distributed.pipelining is not available", allow_module_level=True)

from pipesim.emulator import emulate  # noqa: E402

TINY = os.path.join(os.path.dirname(__file__), "..", "scenarios", "emulator", "tiny_1f1b.yaml")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_torch_pipelining_agrees_with_emulator(schedule):
    ref = torch_pipelining_run(TINY, schedule, steps=2, warmup=1)
    ours = emulate(TINY, overrides=[f"training.schedule={schedule}"], steps=2, warmup=1)
    assert len(ref["loss_per_step"]) == 3
    assert ours["loss_per_step"] == pytest.approx(ref["loss_per_step"], rel=1e-5)
    # both count weights, gradients, optimizer state and autograd-saved tensors the same way
    ours_peak = [r["peak_memory_bytes"] for r in sorted(ours["ranks"], key=lambda r: r["rank"])]
    assert ours_peak == pytest.approx(ref["peak_memory_bytes"], rel=0.02)
    # gpipe keeps all M micro-batches' activations on rank 0, 1f1b at most P: less memory
    assert ref["step_time_s"] > 0 and ours["step_time_s"] > 0
