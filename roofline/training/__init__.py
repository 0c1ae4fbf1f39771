"""Training steps of a decoder-only transformer: forward, backward, recomputation, optimizer and communication.

A step is a model (`roofline.Transformer`), devices and their fabrics (`roofline.System`), a parallel layout
(`TrainingParallelism`: tensor with or without sequence parallelism, pipeline 1F1B or interleaved, context, data,
expert), sharding (`Sharding`: ZeRO 0-3, FSDP full or hybrid), types (`TrainingPrecision`), the batch, the
recomputation policy and the optimizer (`TrainingRun`), and what overlaps (`Overlap`). Every op is costed by the
op core and every collective by `roofline.collective` on the profile's fabrics (`estimate_training`); `plan_training`
searches layouts for the fastest that fits.

Sources: Shoeybi et al. 2019 (Megatron-LM tensor parallelism); Narayanan et al. 2021 (pipeline schedules, bubble,
rank layout, model FLOPs); Korthikanti et al. 2022, arXiv 2205.05198 (sequence parallelism, selective
recomputation, activation memory); Rajbhandari et al. 2020 (ZeRO); Zhao et al. 2023 (PyTorch FSDP); Dao 2023
(FlashAttention-2's backward); Micikevicius et al. 2018 (mixed precision); Kaplan et al. 2020 (6·N·D).
"""

from roofline.training._config import (
    Overlap,
    Sharding,
    TrainingConfigError,
    TrainingParallelism,
    TrainingPrecision,
    TrainingRun,
    validate_training,
)
from roofline.training._memory import (
    TrainingMemory,
    activation_bytes,
    activation_bytes_per_layer,
    communication_buffers,
    stage_parameters,
    training_memory,
)
from roofline.training._ops import FLASH_BACKWARD, OpCost
from roofline.training._plan import RANKINGS, PlanEntry, PlanSpace, TrainingPlan, plan_training
from roofline.training._results import CommunicationRow, OpRow, TrainingEstimate
from roofline.training._step import StepCache, estimate_training, group_topology, optimizer_passes

__all__ = [
    "FLASH_BACKWARD",
    "RANKINGS",
    "CommunicationRow",
    "OpCost",
    "OpRow",
    "Overlap",
    "PlanEntry",
    "PlanSpace",
    "Sharding",
    "StepCache",
    "TrainingConfigError",
    "TrainingEstimate",
    "TrainingMemory",
    "TrainingParallelism",
    "TrainingPlan",
    "TrainingPrecision",
    "TrainingRun",
    "activation_bytes",
    "activation_bytes_per_layer",
    "communication_buffers",
    "estimate_training",
    "group_topology",
    "optimizer_passes",
    "plan_training",
    "stage_parameters",
    "training_memory",
    "validate_training",
]
