"""Shared check of the emulator tests: one emulated step's loss and every parameter gradient
equal a single-process run of the same model on the same batch (to fp32 round-off)."""
import pytest


def matches_single_process(path, tmp_path, sets, timeout):
    """Emulate one step of scenario `path` with `sets`, compare with one process; (scenario, result)."""
    import torch
    from pipesim.emulator import emulate, prepare
    from pipesim.emulator.reference import assemble_grads, single_process_grads

    s = prepare(path, sets)
    result = emulate(s, steps=1, warmup=0, dump_grads=True, run_dir=str(tmp_path), timeout=timeout)
    loss, grads = assemble_grads(str(tmp_path))
    ref_loss, ref = single_process_grads(s)
    assert set(grads) == set(ref)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    for name, g in ref.items():
        assert grads[name].shape == g.shape, name
        # fp32 round-off from a different summation order (micro-batches, TP/CP shards)
        torch.testing.assert_close(grads[name], g, rtol=1e-4, atol=1e-6, msg=name)
    return s, result
