"""Whole inference runs of a decoder-only transformer: prefill, every decode step, memory and communication.

A run is a model (`Transformer`), a device and its fabrics (`System`), a parallel layout (`Parallelism`), storage
types (`Precision`) and a workload (`Workload`). Each forward pass is built from the op core (`roofline.ops`), per
device, and every op of every run is evaluated at once: ops of one kind with the same static arguments on the same
device are concatenated into one vectorised call (`_evaluation`), whichever run or decode step they belong to, so a
sweep of a thousand configurations costs a few dozen numpy calls.

The decode never loops in Python over tokens. Step t of a request with P prompt tokens attends to P + t keys;
everything else in a step depends only on how many sequences are active. The steps are evaluated as numpy arrays:
all of them when there are at most `InferenceRun.decode_samples`, otherwise that many evenly spaced steps (and
every step where the active batch changes), summed with the exact weights of the piecewise-linear interpolant
between them (`linear_weights`). A step's time is affine in the context but for the attention kernel's block
quantization, so the sampled sum is within 1e-4 of the step-by-step one (tests/roofline/inference/test_decode.py).

Collectives (tensor-parallel all-reduces, pipeline sends, expert all-to-alls) are timed by `roofline.collectives`
on the topology the service builds from the profile's fabrics.

Sources: kipply, "Transformer Inference Arithmetic" (2022) and Kaplan et al. 2020 for parameters, FLOPs and the KV
cache; Shoeybi et al. 2019 (Megatron-LM) for tensor parallelism; Huang et al. 2019 (GPipe) for the pipeline;
Shazeer et al. 2017 / Fedus et al. 2021 for mixture-of-experts routing; Shazeer 2019 (MQA) and Ainslie et al. 2023
(GQA); Pope et al. 2022, "Efficiently Scaling Transformer Inference", for the per-device memory and
communication of a partitioned decode.
"""

from roofline.inference._config import (
    Corrected,
    Corrector,
    InferenceConfigError,
    InferenceRun,
    Mla,
    Moe,
    OpGroup,
    Parallelism,
    Precision,
    System,
    Transformer,
    Workload,
    validate_inference,
)
from roofline.inference._decode import linear_weights
from roofline.inference._evaluation import CUSTOM_ALL_REDUCE_MAX_BYTES
from roofline.inference._memory import kv_bytes_per_sequence, parameter_count, touched_experts, weights_per_device
from roofline.inference._results import (
    COMMUNICATION,
    PIPELINE_BUBBLE,
    InferenceEstimate,
    MemoryUse,
    OpRow,
    ParameterCount,
    PhaseEstimate,
)
from roofline.inference._run import estimate_inference, estimate_inferences

__all__ = [
    "COMMUNICATION",
    "CUSTOM_ALL_REDUCE_MAX_BYTES",
    "PIPELINE_BUBBLE",
    "Corrected",
    "Corrector",
    "InferenceConfigError",
    "InferenceEstimate",
    "InferenceRun",
    "MemoryUse",
    "Mla",
    "Moe",
    "OpGroup",
    "OpRow",
    "Parallelism",
    "ParameterCount",
    "PhaseEstimate",
    "Precision",
    "System",
    "Transformer",
    "Workload",
    "estimate_inference",
    "estimate_inferences",
    "kv_bytes_per_sequence",
    "linear_weights",
    "parameter_count",
    "touched_experts",
    "validate_inference",
    "weights_per_device",
]
