"""Whole runs: each run's passes registered with one evaluator, every op of every run evaluated together, then each
run's estimate assembled from its passes: the pipeline timeline of the prefill and of every decode step, the
breakdown's rows, memory and the largest batch that fits."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from roofline._hardware import dtype_bytes
from roofline._num import Array
from roofline.inference._config import InferenceConfigError, InferenceRun, IntArray, validate_inference
from roofline.inference._decode import active_requests, linear_weights, sample_steps
from roofline.inference._evaluation import P10, P90, RAW_TIME, TIME, Evaluator
from roofline.inference._layers import LayerOps
from roofline.inference._memory import (
    activation_bytes_per_sequence,
    kv_bytes_per_sequence,
    parameter_count,
    weights_per_device,
)
from roofline.inference._phase import Pass, communication, op_rows, pass_time, timeline_row
from roofline.inference._results import PIPELINE_BUBBLE, InferenceEstimate, MemoryUse, OpRow, PhaseEstimate


class RunPlan:
    """One run: validates it, registers its ops with the evaluator, and assembles the estimate afterwards."""

    def __init__(self, run: InferenceRun, ev: Evaluator) -> None:
        validate_inference(run)
        self.run, self.ev = run, ev
        self.hidden_bytes = run.model.hidden * dtype_bytes(run.precision.activations)
        self.hw = run.system.hardware
        self.wl = run.workload
        self.batch = self.wl.batch
        p = run.parallelism.pipeline
        self.micro = run.parallelism.micro_batches or min(self.batch, p)
        prompts = self.wl.prompt_tokens.astype(np.float64)
        outputs = self.wl.output_tokens.astype(np.int64)
        weights = self.wl.weights
        self.prompt_total = float(prompts @ weights)
        self.span = run.parallelism.tensor * p  # the devices a pipeline send crosses
        self._register_prefill(prompts, weights)
        self._register_decode(prompts, outputs, weights)

    def _register_prefill(self, prompts: Array, weights: Array) -> None:
        """Prefill: every prompt, in `micro` micro-batches; the LM head runs on each sequence's last position."""
        run = self.run
        self.prefill = Pass(1, sum_points=True)
        b_m = self.batch / self.micro
        unique_p, which = np.unique(prompts, return_inverse=True)
        counts = np.bincount(which.reshape(-1), weights=weights)
        self.prefill_send = (
            self.ev.collective(
                run.system,
                "send_recv",
                self.span,
                np.array([self.prompt_total / self.micro]) * self.hidden_bytes,
                run.precision.activations,
            )
            if run.parallelism.pipeline > 1
            else None
        )
        LayerOps(
            run, self.ev, self.prefill, tokens=np.array([self.prompt_total / self.micro]),
            attn=(counts / self.micro, unique_p, unique_p), sequences=np.array([b_m]), prefill=True,
        ).register()  # fmt: skip

    def _register_decode(self, prompts: Array, outputs: IntArray, weights: Array) -> None:
        """Decode: the sampled steps (`roofline.inference._decode`), each a forward pass of the requests still
        decoding, one new token each."""
        run = self.run
        self.steps = int(outputs.max()) - 1
        self.samples = (
            sample_steps(outputs, self.steps, run.decode_samples) if self.steps > 0 else np.zeros(0, dtype=np.int64)
        )
        self.decode = Pass(self.samples.size)
        if self.steps > 0:
            self.active, contexts = active_requests(self.samples, prompts, outputs, weights)
            self.micro_k = np.minimum(float(self.micro), self.active)
            b_k = self.active / self.micro_k
            self.weights = linear_weights(self.samples)
            self.step_bytes = b_k * self.hidden_bytes
            if run.parallelism.pipeline > 1:
                self.decode_send = self.ev.collective(
                    run.system, "send_recv", self.span, self.step_bytes, run.precision.activations
                )
            LayerOps(
                run, self.ev, self.decode, tokens=b_k, attn=(b_k, np.ones_like(b_k), contexts / self.active),
                sequences=b_k, prefill=False,
            ).register()  # fmt: skip

    # -- assembling --

    def assemble(self) -> InferenceEstimate:
        m, par = self.run.model, self.run.parallelism
        p, mb = par.pipeline, float(self.micro)
        prefill = self._prefill()
        decode, first, mean, last = self._decode()
        return InferenceEstimate(
            parameters=parameter_count(m),
            memory=self.memory(),
            max_batch_that_fits=self.max_batch(),
            prefill=prefill,
            decode=decode,
            decode_steps=self.steps,
            decode_first_step_s=first,
            decode_mean_step_s=mean,
            decode_last_step_s=last,
            output_tokens=int(self.wl.output_tokens @ self.wl.weights),
            pipeline_bubble_fraction=(p - 1) / (mb + p - 1),
            assumptions={
                "micro_batches": self.micro,
                "decode_steps_evaluated": int(self.samples.size),
                "collectives": "roofline.collectives, fastest algorithm per message (auto)",
            },
        )

    def _prefill_timeline(self, pre: dict[str, tuple[Array, float]], term: int) -> tuple[float, float, float]:
        """(phase time, pipeline sends, bubble) from the op times of row `term` of the results. GPipe: m
        micro-batches through p stages take (m + p − 1) stage times τ plus p − 1 sends."""
        p, mb = self.run.parallelism.pipeline, float(self.micro)
        tau = pass_time(pre, term) / p
        send = self.prefill_send.seconds(term) if self.prefill_send is not None else np.zeros(1)
        return float(((mb + p - 1) * tau + (p - 1) * send)[0]), float((p - 1) * send[0]), float((p - 1) * tau[0])

    def _prefill(self) -> PhaseEstimate:
        p, mb = self.run.parallelism.pipeline, float(self.micro)
        corrected = self.run.system.correct is not None
        banded = self.run.system.intervals is not None
        pre = self.prefill.totals()
        send_bytes = np.array([self.prompt_total / mb]) * self.hidden_bytes
        prefill_time, pre_send, pre_idle = self._prefill_timeline(pre, TIME)
        raw_pre = self._prefill_timeline(pre, RAW_TIME) if corrected else None
        low, high = (self._prefill_timeline(pre, P10), self._prefill_timeline(pre, P90)) if banded else (None, None)
        rows = op_rows(pre, np.array([mb / p]), np.ones(1), self.prefill.corrections(), corrected, banded)
        comm = communication(pre, np.array([mb / p]), np.ones(1))
        if p > 1:
            comm["pipeline"] = pre_send
            raw_send, raw_idle = (raw_pre[1], raw_pre[2]) if raw_pre else (None, None)
            send_band, idle_band = ((low[1], high[1]), (low[2], high[2])) if low and high else (None, None)
            rows.append(timeline_row("pipeline_send", p - 1.0, float((p - 1) * send_bytes[0]), pre_send, raw_send,
                                     send_band))  # fmt: skip
            rows.append(timeline_row(PIPELINE_BUBBLE, 0.0, 0.0, pre_idle, raw_idle, idle_band))
        return PhaseEstimate(
            prefill_time, rows, comm, raw_pre[0] if raw_pre else None, low[0] if low else None,
            high[0] if high else None,
        )  # fmt: skip

    def _decode_timeline(self, dec: dict[str, tuple[Array, float]], term: int) -> tuple[Array, float, float]:
        """(time of each sampled step, pipeline sends, bubble) from the op times of row `term`. Every step advances
        each sequence once: m micro-batches keep the stages busy (m·τ) unless one micro-batch's round trip through
        the p stages is longer (p·(τ + send))."""
        p = self.run.parallelism.pipeline
        mk, w = self.micro_k, self.weights
        tau_k = pass_time(dec, term) / p
        step_send = self.decode_send.seconds(term) if p > 1 else np.zeros_like(tau_k)
        step = np.maximum(mk * tau_k, p * (tau_k + step_send))
        idle = np.maximum(0.0, p - mk) * tau_k
        return step, float(w @ (step - mk * tau_k - idle)), float(w @ idle)

    def _decode(self) -> tuple[PhaseEstimate, float | None, float | None, float | None]:
        """The decode phase, and its first, mean and last step's time (None without decode steps)."""
        p = self.run.parallelism.pipeline
        corrected = self.run.system.correct is not None
        banded = self.run.system.intervals is not None
        first = mean = last = None
        rows: list[OpRow] = []
        comm = {"tensor_parallel": 0.0, "pipeline": 0.0, "expert": 0.0}
        decode_time = 0.0
        raw_decode: float | None = 0.0 if corrected else None
        band: tuple[float, float] | None = (0.0, 0.0) if banded else None
        if self.steps > 0:
            dec = self.decode.totals()
            mk, w = self.micro_k, self.weights
            step, dec_send, dec_idle = self._decode_timeline(dec, TIME)
            raw_dec = self._decode_timeline(dec, RAW_TIME) if corrected else None
            low, high = (self._decode_timeline(dec, P10), self._decode_timeline(dec, P90)) if banded else (None, None)
            decode_time = float(w @ step)
            raw_decode = float(w @ raw_dec[0]) if raw_dec else None
            band = (float(w @ low[0]), float(w @ high[0])) if low and high else None
            first, last, mean = float(step[0]), float(step[-1]), decode_time / self.steps
            rows = op_rows(dec, mk / p, w, self.decode.corrections(), corrected, banded)
            comm = communication(dec, mk / p, w)
            if p > 1:
                comm["pipeline"] = dec_send
                raw_send, raw_idle = (raw_dec[1], raw_dec[2]) if raw_dec else (None, None)
                send_band, idle_band = ((low[1], high[1]), (low[2], high[2])) if low and high else (None, None)
                send_total = float(w @ (p * self.step_bytes))
                rows.append(timeline_row("pipeline_send", float(p), send_total, dec_send, raw_send, send_band))
                rows.append(timeline_row(PIPELINE_BUBBLE, 0.0, 0.0, dec_idle, raw_idle, idle_band))
        p10, p90 = band if band is not None else (None, None)
        return PhaseEstimate(decode_time, rows, comm, raw_decode, p10, p90), first, mean, last

    def memory(self) -> MemoryUse:
        run, m, par, prec = self.run, self.run.model, self.run.parallelism, self.run.precision
        # The last output token is sampled, never fed back: a request holds p + o − 1 tokens of K and V at most.
        w = self.wl.weights
        contexts = self.wl.prompt_tokens + self.wl.output_tokens - 1
        kv = sum(kv_bytes_per_sequence(m, par, prec, float(c)) * n for c, n in zip(contexts, w, strict=True))
        naive = run.attention == "naive"
        act = (
            sum(
                activation_bytes_per_sequence(m, par, prec, float(pt), naive) * n
                for pt, n in zip(self.wl.prompt_tokens, w, strict=True)
            )
            / self.micro
        )
        return MemoryUse(
            weights_per_device(m, par, prec), float(kv), float(act), run.system.hardware.memory_capacity_bytes
        )

    def max_batch(self) -> int:
        """The largest batch of requests shaped like the longest one that fits: the capacity left by the weights
        over one sequence's KV cache and prefill activations (both linear in the batch)."""
        run, m, par, prec = self.run, self.run.model, self.run.parallelism, self.run.precision
        context = float((self.wl.prompt_tokens + self.wl.output_tokens - 1).max())
        prompt = float(self.wl.prompt_tokens.max())
        micro = float(par.micro_batches or par.pipeline)
        naive = run.attention == "naive"
        per_sequence = kv_bytes_per_sequence(m, par, prec, context)
        per_sequence += activation_bytes_per_sequence(m, par, prec, prompt, naive) / micro
        free = run.system.hardware.memory_capacity_bytes - weights_per_device(m, par, prec)
        return max(0, math.floor(free / per_sequence))


def estimate_inferences(runs: Sequence[InferenceRun]) -> list[InferenceEstimate]:
    """Estimate many runs with their ops evaluated together (one vectorised call per kind of op and device)."""
    ev = Evaluator()
    plans = []
    for index, run in enumerate(runs):
        ev.owner = index
        try:
            plans.append(RunPlan(run, ev))
        except InferenceConfigError as err:
            raise InferenceConfigError(err.field, err.message, index) from None
    ev.run()
    return [plan.assemble() for plan in plans]


def estimate_inference(run: InferenceRun) -> InferenceEstimate:
    """A whole inference run on one replica (`InferenceRun.parallelism` devices): prefill, decode steps (first, mean,
    last), per-op breakdowns per phase, memory per device, the largest batch that fits and communication. Times in
    seconds, bytes per device."""
    return estimate_inferences([run])[0]
