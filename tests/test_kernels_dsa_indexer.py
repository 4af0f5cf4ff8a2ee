"""The DSA lightning-indexer score kernel (pipesim.kernels.dsa_indexer_kernel) against its torch
reference: causal mask, sequence tails, heads summed with their weights, fp32 and fp16."""
import pytest

from _kernel_helpers import DEVICES, DTYPES, TOL, dtype_params, torch  # noqa: F401  (sets TRITON_INTERPRET)


def inputs(device, dtype, B=1, S=40, H=4, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, S, H, D, generator=g).to(DTYPES[dtype]).to(device)
    k = torch.randn(B, S, D, generator=g).to(DTYPES[dtype]).to(device)
    w = torch.randn(B, S, H, generator=g).to(device)
    return q, k, w


@pytest.mark.parametrize("device", DEVICES)
def test_index_scores_match_the_reference(device):
    from pipesim.kernels.dsa_indexer_kernel import index_scores, index_scores_reference
    for dtype in dtype_params(device):
        q, k, w = inputs(device, dtype, B=2, S=40)           # 40: tails of the 16-wide tiles
        got, ref = index_scores(q, k, w), index_scores_reference(q, k, w)
        above = torch.ones(40, 40, dtype=torch.bool).triu(1).to(device)
        assert torch.isinf(got[:, above]).all() and (got[:, above] < 0).all()
        torch.testing.assert_close(got[:, ~above], ref[:, ~above], **TOL[dtype])


def test_reference_is_the_papers_formula():
    from pipesim.kernels.dsa_indexer_kernel import index_scores_reference
    q, k, w = inputs("cpu", "fp32", S=5, H=3, D=4)
    ref = index_scores_reference(q, k, w)
    t, s = 4, 2
    by_hand = sum(w[0, t, j] * torch.relu(q[0, t, j] @ k[0, s]) for j in range(3))
    assert ref[0, t, s] == pytest.approx(float(by_hand), rel=1e-5)
    assert ref[0, 1, 3] == float("-inf")


def test_bad_shapes_are_one_line_errors():
    from pipesim.kernels.dsa_indexer_kernel import index_scores
    q, k, w = inputs("cpu", "fp32")
    with pytest.raises(ValueError, match="expected k"):
        index_scores(q, k[:, :, :8], w)
