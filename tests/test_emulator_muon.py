"""Muon on the emulated ranks (pipesim/emulator/muon.py): the orthogonalisation is torch's
iteration, Q/K/V apart, and the whole update is the same whatever the pipeline split."""
import os

import pytest

torch = pytest.importorskip("torch")

from pipesim import load_scenario  # noqa: E402
from pipesim.emulator.muon import join_rows, orthogonalize, split_rows  # noqa: E402
from pipesim.emulator.optim import Optimizer  # noqa: E402
from pipesim.errors import PipesimError  # noqa: E402

TINY = os.path.join(os.path.dirname(__file__), "..", "scenarios", "emulator", "tiny_1f1b.yaml")


def test_orthogonalize_is_torch_muons_iteration():
    from torch.optim._muon import _zeropower_via_newtonschulz
    g = torch.randn(24, 40, generator=torch.Generator().manual_seed(0))
    ref = _zeropower_via_newtonschulz(g, (3.4445, -4.775, 2.0315), 5, 1e-7).float()   # torch runs bf16
    torch.testing.assert_close(orthogonalize(g, 5), ref, rtol=0.05, atol=0.02)
    tall = orthogonalize(g.T.contiguous(), 5)
    torch.testing.assert_close(tall, orthogonalize(g, 5).T)
    s = torch.linalg.svdvals(orthogonalize(g, 5))
    assert 0.3 < float(s.min()) and float(s.max()) < 1.6      # near-orthogonal, as Muon's iteration leaves it


def test_qkv_blocks_are_orthogonalised_apart():
    split = (8, 4, 4)                               # two query heads of 4 per kv group, k, v
    w = torch.randn(2 * 16, 12, generator=torch.Generator().manual_seed(1))
    q, k, v = split_rows(w, split)
    assert (q.shape, k.shape, v.shape) == ((16, 12), (8, 12), (8, 12))
    assert torch.equal(join_rows([q, k, v], split, w), w)
    assert torch.equal(k, torch.cat([w[8:12], w[24:28]]))     # each group's k rows


def test_optimizer_keeps_one_state_for_matrices_and_leaves_embeddings_to_adam():
    emb = torch.nn.Parameter(torch.randn(10, 4))
    mat = torch.nn.Parameter(torch.randn(6, 4))
    bias = torch.nn.Parameter(torch.randn(6))
    for p in (emb, mat, bias):
        p.grad = torch.randn_like(p)
    names = {id(emb): "embedding.word", id(mat): "layers.0.fc1.weight", id(bias): "layers.0.fc1.bias"}
    opt = Optimizer([emb, mat, bias], "muon", (names, None, 5))
    assert opt.matrix_numel == 24 and opt.nbytes() == 8 * (40 + 6) + 4 * 24
    before = mat.detach().clone()
    opt.step()
    assert not torch.equal(before, mat.detach())


def test_the_schedule_does_not_change_the_muon_updates(tmp_path):
    """Two schedules of the same 2-stage split take the same Muon steps (the update depends on the
    gradients only), and they are Muon's: the trajectory leaves Adam's after the first step."""
    from pipesim.emulator import emulate, prepare
    runs = {}
    for opt, schedule in (("muon", "gpipe"), ("muon", "1f1b"), ("adam", "1f1b")):
        s = prepare(TINY, [f"training.optimizer={opt}", f"training.schedule={schedule}"])
        result = emulate(s, steps=3, warmup=0, run_dir=str(tmp_path / f"{opt}-{schedule}"), timeout=60)
        runs[opt, schedule] = result["loss_per_step"]
        assert any(e["kind"] == "NEWTON_SCHULZ" for e in result["events"]) == (opt == "muon")
    assert runs["muon", "gpipe"] == pytest.approx(runs["muon", "1f1b"], rel=1e-6)
    assert runs["muon", "1f1b"][0] == pytest.approx(runs["adam", "1f1b"][0], rel=1e-6)     # same start
    assert runs["muon", "1f1b"][2] != pytest.approx(runs["adam", "1f1b"][2], rel=1e-5)


def test_duplicated_tensor_mode_is_refused_with_tensor_parallelism():
    from pipesim.emulator.model import check_supported
    base = {"model": {"preset": "gpt2-small", "vocab_size": 50304}, "system": "dgx-a100-80gb",
            "parallel": {"tensor": 2, "data": 4},
            "training": {"global_batch_size": 8, "optimizer": "muon"}}
    with pytest.raises(PipesimError, match="blockwise"):
        check_supported(load_scenario(base))
    check_supported(load_scenario(base, ["training.muon_tp_mode=blockwise"]))
