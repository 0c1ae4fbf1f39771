"""Between the API contract (`schemas`) and the modelling core (`roofline`): schema objects become core objects and
calls, core results become response rows. Imports `schemas`, `roofline`, numpy and the standard library only
(enforced by import-linter); knows nothing of HTTP or the database. Errors are `InvalidField`, naming the request or
response field; the service answers them as a 422.

- hardware profiles and options → `roofline.Hardware` (`to_core`, `scoped_core`);
- ops → core calls (`evaluate`, `sweep`), and the one vectorised batch evaluator (`evaluate_ops`, `predict`) that op
  estimates, stored predictions and calibrations share;
- core estimates → response items (`item_dict`, `item_dicts`);
- collectives → topologies and `CollectiveRead` (`device_topology`, `request_topology`, `estimate_collective`);
- inference requests and model configs → `roofline.InferenceRun` and `InferenceRead` documents (`transformer`,
  `prepare_run`, `render_run`);
- training requests → `roofline.TrainingRun` and `TrainingRead` documents (`training_run`, `estimate_training`,
  `render_training`), and training plans → `roofline.plan_training` and `TrainingPlanRead` documents
  (`plan_training`, `render_training_plan`);
- load-test result files (aiperf, GuideLLM, vLLM, SGLang, inference-perf, trtllm-bench) read and checked, and the
  load they describe (`read_load_test`, `load_of`, `load_test_errors`);
- request traces: files parsed and checked, encoded for storage (`parse_trace`, `trace_of`, `decode_trace`);
- JSON inputs: nesting past the limit and NUL characters refused, whatever the schema (`check_json`, `nul_error`);
- calibrations applied to core estimates before they are rendered (`Fitted`, `correct`, `calibrate_points`,
  `RunCorrector`), and fitted on measured results with their held-out errors (`calibration_groups`,
  `fit_calibration`, `error_stats`).
"""

from adapters._batch import (
    Batch,
    CollectiveGroup,
    OpGroup,
    Predictions,
    evaluate_ops,
    predict,
    predict_measured,
    template_key,
)
from adapters._calibration import (
    METHODS,
    NOTES,
    UNCALIBRATED,
    CalibrationUse,
    Chosen,
    Fitted,
    FittedGroup,
    RunCorrector,
    calibrate_docs,
    calibrate_points,
    calibrated,
    correct,
    covering,
    describe,
    describe_sized,
    group_of,
    op_kind,
    template_of,
    variant_codes,
)
from adapters._calibration_fit import CalibrationFit, calibration_groups, error_stats, fit_calibration
from adapters._collectives import (
    describe_topology,
    device_topology,
    estimate_collective,
    fabric,
    memory_bytes_per_s,
    request_device_topology,
    request_topology,
)
from adapters._errors import InvalidField, non_finite
from adapters._hardware import KERNEL_FLOOR_S, scope_launch_s, scoped_core, to_core
from adapters._inference import (
    Prepared,
    estimate_runs,
    inference_run,
    inference_system,
    prepare_run,
    render_run,
    topologies,
    transformer,
)
from adapters._intervals import (
    TABLE_PATH,
    applied_correction,
    calibration_band,
    interval_family,
    interval_table,
    with_interval,
)
from adapters._json import check_json, depth_error, nul_error
from adapters._loadtests import (
    FORMATS,
    Figures,
    Measured,
    ServingCorrection,
    calibrate_serving,
    check_measured,
    correction_of,
    fit_serving,
    held_out,
    load_of,
    load_test_errors,
    measured_doc,
    read_load_test,
)
from adapters._ops import check_sweep, evaluate, size_fields, sweep, sweep_docs
from adapters._rows import item_dict, item_dicts, with_assumptions
from adapters._serving import estimate_serving, host_link, live_serving, render_serving, serving_requests
from adapters._serving_plan import (
    PLAN_DEADLINE_S,
    Hardware,
    PlanOutcome,
    PlanSearch,
    finish_plan,
    plan_in_process,
    plan_serving,
    prepare_plan,
)
from adapters._sharing import trace_requests
from adapters._trace_sharing import request_fields, shared_columns
from adapters._traces import TRACE_FILE_TYPES, Trace, decode_trace, media_type, parse_trace, trace_of
from adapters._training import estimate_training, render_training, training_run
from adapters._training_plan import plan_training, render_training_plan

__all__ = [
    "FORMATS",
    "KERNEL_FLOOR_S",
    "METHODS",
    "NOTES",
    "PLAN_DEADLINE_S",
    "TABLE_PATH",
    "TRACE_FILE_TYPES",
    "UNCALIBRATED",
    "Batch",
    "CalibrationFit",
    "CalibrationUse",
    "Chosen",
    "CollectiveGroup",
    "Figures",
    "Fitted",
    "FittedGroup",
    "Hardware",
    "InvalidField",
    "Measured",
    "OpGroup",
    "PlanOutcome",
    "PlanSearch",
    "Predictions",
    "Prepared",
    "RunCorrector",
    "ServingCorrection",
    "Trace",
    "applied_correction",
    "calibrate_docs",
    "calibrate_points",
    "calibrate_serving",
    "calibrated",
    "calibration_band",
    "calibration_groups",
    "check_json",
    "check_measured",
    "check_sweep",
    "correct",
    "correction_of",
    "covering",
    "decode_trace",
    "depth_error",
    "describe",
    "describe_sized",
    "describe_topology",
    "device_topology",
    "error_stats",
    "estimate_collective",
    "estimate_runs",
    "estimate_serving",
    "estimate_training",
    "evaluate",
    "evaluate_ops",
    "fabric",
    "finish_plan",
    "fit_calibration",
    "fit_serving",
    "group_of",
    "held_out",
    "host_link",
    "inference_run",
    "inference_system",
    "interval_family",
    "interval_table",
    "item_dict",
    "item_dicts",
    "live_serving",
    "load_of",
    "load_test_errors",
    "measured_doc",
    "media_type",
    "memory_bytes_per_s",
    "non_finite",
    "nul_error",
    "op_kind",
    "parse_trace",
    "plan_in_process",
    "plan_serving",
    "plan_training",
    "predict",
    "predict_measured",
    "prepare_plan",
    "prepare_run",
    "read_load_test",
    "render_run",
    "render_serving",
    "render_training",
    "render_training_plan",
    "request_device_topology",
    "request_fields",
    "request_topology",
    "scope_launch_s",
    "scoped_core",
    "serving_requests",
    "shared_columns",
    "size_fields",
    "sweep",
    "sweep_docs",
    "template_key",
    "template_of",
    "to_core",
    "topologies",
    "trace_of",
    "trace_requests",
    "training_run",
    "transformer",
    "variant_codes",
    "with_assumptions",
    "with_interval",
]
