"""Per-layer forward/backward time of a GPT 22B layer on DGX A100 (TP 8, micro-batch 4, s 2048):
pipesim against Korthikanti et al. 2022 Table 4, a published layer-level measurement that pipesim
never used to set a cost. It tests the per-op model (GEMM curve, memory-bound ops, TP collectives,
recompute policy, sequence parallelism) apart from the schedule.

    python benchmarks/layer_times.py
"""
from pipesim.whatif.validation_heldout import layer_times_22b


def main() -> None:
    print("GPT 22B layer on DGX A100, TP 8, micro-batch 4 (Korthikanti et al. 2022, Table 4), ms")
    print(f"  {'recompute':10s} {'SP':5s} {'F pipesim':>9s} {'F pub':>6s} {'err %':>6s}   "
          f"{'B pipesim':>9s} {'B pub':>6s} {'err %':>6s}")
    errs = []
    for r in layer_times_22b():
        ef = 100 * (r["forward_pub_ms"] / r["forward_ms"] - 1)
        eb = 100 * (r["backward_pub_ms"] / r["backward_ms"] - 1)
        errs += [abs(ef), abs(eb)]
        print(f"  {r['recompute']:10s} {str(r['sequence_parallel']):5s} {r['forward_ms']:9.2f} "
              f"{r['forward_pub_ms']:6.1f} {ef:+6.1f}   {r['backward_ms']:9.2f} {r['backward_pub_ms']:6.1f} {eb:+6.1f}")
    print(f"  mean |error| {sum(errs) / len(errs):.1f} % (error = throughput sense: + means pipesim is faster)")


if __name__ == "__main__":
    main()
