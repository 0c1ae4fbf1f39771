"""Every bound on what a request may ask for, in one place (README, "Limits").

Two kinds of bound. Sizes of lists, grids and strings keep one request's work and memory bounded: nothing a client
sends can make the service allocate without limit or run for minutes. Magnitudes of dimensions and figures are
physically generous (orders of magnitude past any device or model that exists) but stop products of dimensions from
leaving float64's exact-integer range and stop divisions from overflowing to infinity, which JSON cannot carry.
The HTTP body itself is bounded by `Settings.max_body_bytes` (service.limits).
"""

from __future__ import annotations

# --- request bodies -------------------------------------------------------------------------------------------------

# POST /v1/benchmarks must take 10 000 results in one body. Measured (tests/service/test_limits.py
# `test_a_10000_result_upload_fits` keeps it true): bench.ingest's batch of 10 000 results is 1.55 MB of JSON, 2.45 MB
# with the defaults the worker fills in, and 13.4 MB if every result were the largest op the worker's suites plan (a
# fused chain). 32 MiB keeps 2.4× headroom over that worst case and bounds what one request makes the service parse.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024

# Nesting of a JSON body, a JSON trace document or a JSON Lines trace line. The deepest document the schemas describe
# is a benchmark upload's fused chain or an inline profile under a merge patch, under 10 levels; 32 leaves room for
# free-form fields (`hardware_patch`, a PATCH body) while what reads them recursively (the merge patch, the json
# module, pydantic's serialiser, orjson's encoder at 254) stays far from Python's ~1 000 frames. More is a 422
# naming the field.
MAX_JSON_DEPTH = 32

# --- lists and grids ------------------------------------------------------------------------------------------------

MAX_OPS = 10_000  # POST /v1/estimate/ops `ops`: one worker upload's worth
MAX_SWEEP_POINTS = 100_000  # POST /v1/estimate/ops `sweep`: vectorised, ~1 s at this size on 2 cores
MAX_SWEEP_FIELDS = 6
MAX_BATCH_ITEMS = 1000  # POST /v1/estimate/inference/batch: items, or points of a sweep (each a whole run)
# POST /v1/plan: candidate deployments, each simulated (~5-10 ms on 2 cores, `python -m bench.plan_serving`): 1 500
# stay well inside the 30 s request time limit on a loaded host; a bigger plan is run as a job (202 and its
# `Location`, service.jobs), up to the job limits below; past those it is a clear 422.
MAX_SERVING_PLAN_CANDIDATES = 1_500
# A plan as a job (POST /v1/jobs, or a plan past the request limits): its candidates run as Ray tasks on every CPU of
# the cluster. 20 000 candidates at ~10 ms are ~200 CPU-seconds; 40 M simulated iterations at ~6 µs ~240 CPU-seconds:
# minutes on one 2-core host, seconds on a fleet of workers (docs/operations.md, "Jobs on Ray").
MAX_JOB_PLAN_CANDIDATES = 20_000
MAX_JOB_PLAN_SIMULATED_ITERATIONS = 40_000_000
MAX_PLAN_SEQS = 1024  # POST /v1/plan max_num_seqs: each candidate simulates 2 × max_num_seqs clients' requests
# POST /v1/plan's work, bounded before it starts: the iterations its operating points simulate, Σ (2 × clients + 64) ×
# (⌈prompt / budget⌉ + 2) (~6 µs each with the surfaces, `bench.plan_serving`'s aggregated-512 case is ~880 000 before
# pruning: 1.5 s), and its distinct engines (hardware × dtypes × tensor × pipeline × expert), a surface each (20-40 ms).
MAX_PLAN_SIMULATED_ITERATIONS = 1_000_000
MAX_PLAN_ENGINES = 128
# POST /v1/plan/training: device counts × layouts searched. Measured with `python -m bench.plan_training` on a 2-core
# host: a search whose every configuration fits (each timed) costs ~0.1 ms a configuration once the shared op and
# collective costs are known, so 20 000 answer in ~2 s, inside the 30 s request time limit on a loaded host.
MAX_TRAINING_PLAN_CANDIDATES = 20_000
MAX_PLAN_DEVICE_COUNTS = 64  # POST /v1/plan/training: counts of a device range (each multiplies the search)
# POST /v1/plan/training `max_results`: each configuration answered carries its whole step estimate (~40 rows).
MAX_TRAINING_PLAN_RESULTS = 50
MAX_RESULTS = 10_000  # POST /v1/benchmarks: results per run
MAX_CHAIN_OPS = 64
MAX_WORKLOAD_REQUESTS = 4096  # request shapes of one inference workload
# POST /v1/estimate/serving: requests simulated (10 000 take ~50 ms on 2 cores; 100 000 stay within a second or two
# and the body of a trace of that many stays near 6 MB).
MAX_SERVING_REQUESTS = 100_000
# POST /v1/estimate/serving, aggregated: each engine's share of the requests is its own event loop, and engines whose
# shares are alike run one (roofline.serving.loops: fixed lengths give a handful whatever the replicas). 4 096 loops,
# the replicas the API took before fleets reached MAX_DEVICES, stay within a second or two (`bench.serving_speed`'s
# fleet case: 4 096 loops over 10 000 log-normal requests, 1.5 s on a busy 2-core host). More is a 422 naming
# body.replicas.
MAX_SERVING_LOOPS = 4096
# POST /v1/estimate/serving, disaggregated: one event loop over both pools, where every event cuts the pure-decode
# stretch of each busy engine, so its work grows as (engines that get requests) × requests, ~2 µs each on a busy
# 2-core host: 2²², 64 engines of each pool under 32 768 overloading requests, took 12 s there (one engine each: 3 s),
# inside the 30 s request time limit. More is a 422 naming the larger pool.
MAX_SERVING_ENGINE_REQUESTS = 1 << 22
# Loads that share prefixes (issue 41): each request's prompt is a chain of block hashes the simulator walks; a
# shared load (prefix groups, sessions) or a trace holds at most 2²³ hashes in all (64 MiB of int64; 10 000 session
# turns of ~4 000 tokens in blocks of 32 are 1.2 M). More is a 422 naming body.load (or the trace).
MAX_SHARED_BLOCKS = 1 << 23
MAX_PREFIX_GROUPS = 100_000  # prefix_groups.count: at most one group per request
MAX_SESSION_TURNS = 10_000  # turns of one session
MAX_LORAS = 1024  # max_loras, max_cpu_loras: vLLM's slots are preallocated on the device; past any deployment's
MAX_LORA_ADAPTERS = 100_000  # load.adapters.count: at most one adapter per request
MAX_HOST_CACHE_BYTES = 1e15  # host_cache_bytes: 1 PB, past any node's memory
MAX_SERVING_SEQS = 65_536  # max_num_seqs: the iteration-time surface has one point per sequence count up to 512
MAX_KV_BLOCK_TOKENS = 1024  # vLLM's largest --block-size choice is 128; TensorRT-LLM's tokens_per_block is 8-128
MAX_DECODE_SAMPLES = 1 << 17  # decode steps evaluated one by one (beyond: interpolated)
MAX_LIST = 64  # small lists: epilogues, search axes, tile candidates
MAX_SOURCES = 100  # citations, notes and figure_sources entries of one profile or model

# --- dimensions -----------------------------------------------------------------------------------------------------

# A product of four dimensions (a batched matmul's 2·b·m·n·k FLOPs) stays below 2⁹⁷, finite and far from overflow.
MAX_DIM = 1 << 24
# A MoE op's experts: the largest published MoE layers hold 384 (Kimi K2) and 512 (Qwen3.5-397B-A17B) experts; twice
# that leaves room while keeping a power-law routing's per-point work (one pass over the experts) bounded.
MAX_EXPERTS = 1024
# An element count: 2⁴⁰ bf16 elements is 2 TiB, more than any device's memory.
MAX_ELEMENTS = 1 << 40
# Tokens of one request: 2 097 152 is twice the longest context any model ships (1M).
MAX_TOKENS = 1 << 21
MAX_BATCH = 1 << 20  # requests per replica
# Devices of one job: a training job (its data-parallel degree and a hybrid shard group too), a serving fleet
# (replicas, disaggregated workers, a plan's fleets), an inference run's replicas, a collective's participants, a torus
# slice (the product of its axes). Llama 3 405B trained on 16 384 H100s (Meta, "The Llama 3 Herd of Models", 2024,
# §3.3) and clusters of 100 000 GPUs and more run today: 2²⁰ = 1 048 576 is ten times those. No request's work grows
# with it: a collective's time is a formula in the count, a training step and the training plan's search cost per
# layout, a serving simulation runs a loop per distinct share of its requests (MAX_SERVING_LOOPS) and a plan sizes
# its fleets by arithmetic (a fleet past this many devices is refused, naming body.traffic).
MAX_DEVICES = 1 << 20
# One parallelism degree inside a replica: tensor, pipeline, context, expert (and virtual pipeline stages). Each must
# divide a model's heads, layers, sequence or experts (the largest models have 128 query heads, ~126 layers and 512
# experts; Llama 3 405B ran TP 8, PP 16, CP 16: §3.3.2, Table 4), so 4 096 is far past any degree that divides one.
# It is not a fleet size: data parallelism, replicas and devices are bounded by MAX_DEVICES.
MAX_DEGREE = 4096
# POST /v1/estimate/training `global_batch` (sequences per optimizer step): 16 M sequences is 8 000 times the largest
# published (GPT-3's 3.2 M tokens are 1 536 sequences); it keeps global_batch × sequence inside float64's exact range.
MAX_GLOBAL_BATCH = 1 << 24
# POST /v1/estimate/training `train_tokens`: 1e15 tokens is ~70 times the largest published training run (15 T).
MAX_TRAIN_TOKENS = 1e15
MAX_LAYERS = 1 << 16  # the largest models have ~130; the inference model allocates per layer
MAX_HEADS = 1 << 16
MAX_CONTEXT_TOKENS = 1 << 31
MAX_COMPUTE_UNITS = 1 << 20  # SMs, CUs, cores per device: a wafer-scale engine has ~900 000 cores
MAX_UNIT_COUNT = 1 << 16  # matrix units per compute unit, threads per unit, links per device, tile edges
MAX_CAPACITY_BYTES = 1 << 50  # 1 PiB: memory of one device, any level
MAX_MESSAGE_BYTES = 1 << 50  # a collective's message
MAX_REPEATS = 1_000_000_000

# --- figures (floats) -----------------------------------------------------------------------------------------------

# A positive SI figure lies in [1e-15, 1e24]: a femtosecond is shorter than any clock period, 10²⁴ FLOP/s or bytes/s
# is a million times the fastest machine. Inside this range, work / (rate × efficiency) stays finite for the largest
# work the dimensions allow (~1e29 FLOPs / (1e-15 × 1e-6) ≈ 1e50 s), so no estimate comes back as infinity.
MIN_POSITIVE = 1e-15
MAX_POSITIVE = 1e24
# An efficiency (fraction of peak) of at least one in a million: below that it describes no kernel, and a denormal
# such as 5e-324 would turn every time into infinity.
MIN_FRACTION = 1e-6
MAX_SECONDS = 1e6  # a fixed cost or latency (launch, hop, overhead): eleven days is no longer a latency
MAX_PER_ELEMENT = 10_000  # FLOPs or transcendentals per element

# --- strings --------------------------------------------------------------------------------------------------------

SLUG_LENGTH = 64
NAME_LENGTH = 200  # names, hosts, device descriptions, free-text fields of one line
TEXT_LENGTH = 2000  # notes, citation titles
URL_LENGTH = 500
KEY_LENGTH = 40  # citation keys, software names
FIELD_PATH_LENGTH = 200  # dotted field paths (figure_sources, sweep `vary` keys)
IDEMPOTENCY_KEY_LENGTH = 200

# --- stored ids -----------------------------------------------------------------------------------------------------

# Versions of a catalogue entry (`/v1/hardware/{slug}/versions/{version}`, `hardware_version` filters) are 32-bit
# integer columns, as run and calibration ids are: a bigger number names nothing and would overflow PostgreSQL's
# INTEGER in the query (a 500).
MAX_STORED_VERSION = 2**31 - 1
