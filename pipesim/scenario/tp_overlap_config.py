"""Transformer Engine's Userbuffers settings, GEMM by GEMM (`training.tp_overlap_cfg`): what TE's
initialize_ub takes as ub_cfgs (transformer_engine/pytorch/module/base.py), Megatron-LM's
--tp-comm-overlap-cfg, NeMo's and Megatron-Bridge's tp_comm_overlap_cfg, MLPerf's tp_overlap yaml.
A GEMM left out takes TE's default (pipesim/costs/tp_overlap.py); `all` sets every GEMM at once,
a GEMM's own entry wins over it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from pipesim.scenario.schema import field

# TE's overlap method of each GEMM (base.py `methods`): the all-gather before a GEMM passed around
# the ring by the copy engines, the reduce-scatter after a forward GEMM pipelined in chunks, the
# column-parallel backward's collectives beside whole GEMMs
UB_METHODS = {"qkv_fprop": "ring_exchange", "fc1_fprop": "ring_exchange", "proj_dgrad": "ring_exchange",
              "fc2_dgrad": "ring_exchange", "proj_fprop": "pipeline", "fc2_fprop": "pipeline",
              "qkv_dgrad": "bulk", "qkv_wgrad": "bulk", "fc1_dgrad": "bulk", "fc1_wgrad": "bulk"}
UbName = Literal[("all",) + tuple(UB_METHODS)]


@dataclass(frozen=True, kw_only=True)
class UbGemm:
    num_sm: Optional[int] = field(None, doc="SMs the pipeline / bulk overlap's communication kernel holds "
                                            "(TE's default 16)")
    set_sm_margin: Optional[bool] = field(None, doc="the GEMM leaves those SMs to it (cuBLASLt's SM count "
                                                    "target; TE's default since 2.0: true, before: false)")
    num_splits: Optional[int] = field(None, doc="chunks a pipeline overlap cuts its GEMM into (TE's default 4)")
    aggregate: Optional[bool] = field(None, doc="ring exchange: two chunks per GEMM (TE's default false)")

    def __post_init__(self):
        if self.num_sm is not None and self.num_sm < 1:
            raise ValueError(f"num_sm must be at least 1 SM, got {self.num_sm}")
        if self.num_splits is not None and self.num_splits < 1:
            raise ValueError(f"num_splits must be at least 1, got {self.num_splits}")


TpOverlapCfg = dict[UbName, UbGemm]
