"""What a training step is made of: the model (`roofline.Transformer`), the devices (`roofline.System`), the parallel
layout (`TrainingParallelism`), the sharding of states (`Sharding`), storage and math types (`TrainingPrecision`),
the batch, the recomputation policy and the optimizer (`TrainingRun`), which communication overlaps computation
(`Overlap`), and the checks that name the input at fault (`validate_training`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from roofline._hardware import dtype_bytes
from roofline.inference import System, Transformer

RECOMPUTE = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved")
OPTIMIZERS = ("adamw", "sgd")
FSDP = (None, "full", "hybrid")
GRADIENT_BUCKETS = ("views", "copies")


class TrainingConfigError(ValueError):
    """A step that cannot be built; `field` names the input at fault (e.g. `parallelism.pipeline`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class TrainingParallelism:
    """Megatron-LM's layout (Narayanan et al. 2021): `tensor` (with `sequence_parallel`, Korthikanti et al. 2022),
    `pipeline` stages run as `schedule` 1F1B or interleaved with `virtual_stages` model chunks per device,
    `context` parallelism (the sequence split over devices, ring attention), `data` replicas, and `expert`
    parallelism over the data group. Devices = tensor × context × pipeline × data."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    context: int = 1
    expert: int = 1
    sequence_parallel: bool = False
    schedule: str = "1f1b"
    virtual_stages: int = 1

    @property
    def devices(self) -> int:
        return self.tensor * self.context * self.pipeline * self.data


@dataclass(frozen=True)
class Sharding:
    """ZeRO (Rajbhandari et al. 2020) stage 0-3 over the data-parallel group: 1 shards optimizer states, 2 also
    gradients, 3 also weights. PyTorch FSDP `full` is stage 3; `hybrid` (HYBRID_SHARD) shards over `shard_group`
    devices and replicates across them."""

    zero: int = 0
    fsdp: str | None = None
    shard_group: int | None = None

    @property
    def stage(self) -> int:
        return 3 if self.fsdp is not None else self.zero


@dataclass(frozen=True)
class TrainingPrecision:
    """Mixed precision (Micikevicius et al. 2018): weights, gradients and activations in `compute` (bf16 or fp16),
    fp32 master weights and optimizer states (`compute` fp32: plain fp32 training, the weights are the master);
    `matmul` "fp8" runs the linear layers' GEMMs in fp8 (Transformer Engine), everything else stays in `compute`."""

    compute: str = "bf16"
    matmul: str | None = None
    master: str = "fp32"
    optimizer_states: str = "fp32"

    @property
    def gemm(self) -> str:
        return self.matmul or self.compute

    @property
    def mixed(self) -> bool:
        """A separate master copy: the compute dtype is not the master's."""
        return self.compute != self.master


@dataclass(frozen=True)
class Overlap:
    """Which communication runs under computation. Defaults are the engines': Megatron-LM's `--overlap-grad-reduce`
    and `--tp-comm-overlap` are off unless asked for; PyTorch FSDP's `backward_prefetch` defaults to BACKWARD_PRE
    (the next all-gather is issued before the current backward), which `fsdp_prefetch` stands for."""

    data_parallel: bool = False
    fsdp_prefetch: bool = True
    tensor_parallel: bool = False


@dataclass(frozen=True)
class TrainingRun:
    """One optimizer step: `global_batch` sequences of `sequence` tokens in micro-batches of `micro_batch` per
    data-parallel replica (gradient accumulation over global_batch / (micro_batch · data) micro-batches).
    `attention` "flash" (FlashAttention-2) or "naive" (scores in device memory, as Megatron-LM in 2022).
    `gradient_buckets`: the data-parallel reduction's buckets are "views" of the gradients (Megatron-LM's contiguous
    gradient buffer; PyTorch DDP with `gradient_as_bucket_view=True`) or "copies" of them (PyTorch DDP's default)."""

    model: Transformer
    system: System
    sequence: int
    micro_batch: int
    global_batch: int
    parallelism: TrainingParallelism = field(default_factory=TrainingParallelism)
    sharding: Sharding = field(default_factory=Sharding)
    precision: TrainingPrecision = field(default_factory=TrainingPrecision)
    recompute: str = "none"
    optimizer: str = "adamw"
    overlap: Overlap = field(default_factory=Overlap)
    attention: str = "flash"
    gradient_buckets: str = "views"

    @property
    def micro_batches(self) -> int:
        """Micro-batches per replica and step (the pipeline's m)."""
        return self.global_batch // (self.micro_batch * self.parallelism.data)


def validate_training(run: TrainingRun, devices: int | None = None) -> None:
    """Raise `TrainingConfigError` naming the input at fault if `run` cannot be built; `devices`, when given, must
    equal the parallelism's product."""
    m, par, sh = run.model, run.parallelism, run.sharding
    sizes = (("tensor", par.tensor), ("pipeline", par.pipeline), ("data", par.data), ("context", par.context))
    for name, value in (*sizes, ("expert", par.expert), ("virtual_stages", par.virtual_stages)):
        if value < 1:
            raise TrainingConfigError(f"parallelism.{name}", "must be at least 1")
    if devices is not None and par.devices != devices:
        raise TrainingConfigError(
            "parallelism", f"tensor × context × pipeline × data = {par.devices}, but there are {devices} devices"
        )
    if m.heads % par.tensor:
        raise TrainingConfigError("parallelism.tensor", f"{par.tensor} does not divide the {m.heads} attention heads")
    if m.kv_heads % par.tensor and par.tensor % m.kv_heads:
        raise TrainingConfigError(
            "parallelism.tensor", f"{par.tensor} and the model's {m.kv_heads} KV heads must divide one another"
        )
    if par.schedule not in SCHEDULES:
        raise TrainingConfigError("parallelism.schedule", f"one of {', '.join(SCHEDULES)}")
    if par.schedule == "1f1b" and par.virtual_stages != 1:
        raise TrainingConfigError("parallelism.virtual_stages", "virtual stages need the interleaved schedule")
    chunks = par.pipeline * par.virtual_stages
    if m.layers % chunks:
        raise TrainingConfigError(
            "parallelism.pipeline",
            f"{m.layers} layers do not split into pipeline ({par.pipeline}) × virtual stages ({par.virtual_stages})"
            " equal chunks",
        )
    if run.sequence % par.context or (par.sequence_parallel and run.sequence % par.tensor):
        raise TrainingConfigError("sequence", "must be divisible by the context (and sequence-parallel) degree")
    if par.expert > 1 and (m.moe is None or m.moe.experts % par.expert or par.data % par.expert):
        raise TrainingConfigError(
            "parallelism.expert", "needs a mixture-of-experts model whose experts and data degree it divides"
        )
    if run.micro_batch < 1 or run.global_batch < 1:
        raise TrainingConfigError("micro_batch", "micro-batch and global batch are at least 1")
    if run.global_batch % (run.micro_batch * par.data):
        raise TrainingConfigError(
            "global_batch",
            f"{run.global_batch} is not a multiple of micro_batch × data = {run.micro_batch * par.data}",
        )
    if par.schedule == "interleaved" and run.micro_batches % par.pipeline:
        raise TrainingConfigError("global_batch", "the interleaved schedule needs micro-batches a multiple of pipeline")
    if sh.zero not in (0, 1, 2, 3) or sh.fsdp not in FSDP:
        raise TrainingConfigError("sharding", "ZeRO stage 0-3, FSDP full or hybrid")
    if sh.shard_group is not None and (sh.shard_group < 1 or par.data % sh.shard_group):
        raise TrainingConfigError("sharding.shard_group", f"must divide the data-parallel degree {par.data}")
    if run.recompute not in RECOMPUTE:
        raise TrainingConfigError("recompute", f"one of {', '.join(RECOMPUTE)}")
    if run.optimizer not in OPTIMIZERS:
        raise TrainingConfigError("optimizer", f"one of {', '.join(OPTIMIZERS)}")
    if run.gradient_buckets not in GRADIENT_BUCKETS:
        raise TrainingConfigError("gradient_buckets", f"one of {', '.join(GRADIENT_BUCKETS)}")
    if run.attention not in ("flash", "naive"):
        raise TrainingConfigError("attention", "flash or naive")
    if run.precision.compute not in ("bf16", "fp16", "fp32"):
        raise TrainingConfigError("precision.compute", "bf16 or fp16 mixed precision, or fp32")
    hw = run.system.hardware
    for name, dtype in (("compute", run.precision.compute), ("matmul", run.precision.gemm)):
        try:
            hw.matrix_peak(dtype)
            dtype_bytes(dtype)
        except ValueError as err:
            raise TrainingConfigError(f"precision.{name}", str(err)) from None
