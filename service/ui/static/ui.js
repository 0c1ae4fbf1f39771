// Ridgeline's pages: forms that build a JSON body from their inputs (data-path), call the JSON API, and show its
// errors beside the field they name; charts drawn with uPlot (vendored, MIT). No rule of the service is repeated here.
"use strict";

const ui = (window.ridgeline = {});

// ---- forms -----------------------------------------------------------------------------------------------------

function active(el) {
  const when = el.dataset.when;
  return !el.disabled && (!when || document.querySelector(when) !== null);
}

function setPath(body, path, value) {
  const parts = path.split(".");
  let at = body;
  for (const part of parts.slice(0, -1)) at = at[part] = at[part] || {};
  at[parts[parts.length - 1]] = value;
}

function getPath(body, path) {
  let at = body;
  for (const part of path.split(".")) {
    if (at === undefined || at === null) return undefined;
    at = at[part];
  }
  return at;
}

function readValue(el) {
  const raw = el.value.trim();
  switch (el.dataset.kind) {
    case "number":
    case "int":
      // Sent as typed: the API says what is wrong with it (a 422 naming the field).
      return raw === "" ? undefined : Number.isNaN(Number(raw)) ? raw : Number(raw);
    case "ints":
      return raw === "" ? undefined : raw.split(",").map((s) => (Number.isNaN(Number(s.trim())) ? s.trim() : Number(s)));
    case "bool":
      return el.type === "checkbox" ? el.checked : raw === "true";
    default:
      return raw === "" ? undefined : raw;
  }
}

ui.collect = function collect(form) {
  const body = {};
  for (const el of form.querySelectorAll("[data-path]")) {
    if (!active(el)) continue;
    if (el.dataset.kind === "list" || el.dataset.kind === "json-list") {
      // Checkboxes that add their value (a string, or a JSON object) to a list at their path.
      if (el.checked) {
        const list = getPath(body, el.dataset.path) || [];
        list.push(el.dataset.kind === "list" ? el.value : JSON.parse(el.value));
        setPath(body, el.dataset.path, list);
      }
      continue;
    }
    const value = readValue(el);
    if (value !== undefined) setPath(body, el.dataset.path, value);
  }
  return body;
};

ui.clearErrors = function clearErrors(form) {
  for (const slot of form.querySelectorAll("[data-error-for]")) slot.textContent = "";
  for (const el of form.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
};

// The error slot for a field path (body.traffic.prompt_tokens.value): the slot of the longest prefix of it, so that an
// error about a whole group (body.traffic) lands beside the group, and one about a list item beside the list.
function slotFor(form, field) {
  const path = field.replace(/^(body|header|query)\.?/, "");
  const parts = path.split(".");
  for (let end = parts.length; end > 0; end--) {
    const key = parts.slice(0, end).join(".");
    const slot = form.querySelector(`[data-error-for="${CSS.escape(key)}"]`);
    if (slot) return slot;
  }
  return form.querySelector('[data-error-for="body"]');
}

// What of the field's path the slot does not already say (shown before the message): "" when the slot is the field's.
function rest(slot, field) {
  const path = field.replace(/^(body|header|query)\.?/, "");
  const key = slot.dataset.errorFor;
  if (key === path) return "";
  return key === "body" ? path : path.slice(key.length + 1);
}

ui.showErrors = function showErrors(form, status, doc) {
  const details = (doc && doc.detail) || [];
  if (!details.length) {
    slotFor(form, "body").textContent = `${status}: ${(doc && doc.message) || "the request failed"}`;
    return;
  }
  let first = null;
  for (const d of details) {
    const slot = slotFor(form, d.field || "body");
    const where = rest(slot, d.field || "body");
    const text = where ? `${where}: ${d.message}` : d.message;
    slot.textContent = (slot.textContent ? slot.textContent + " · " : "") + text;
    const input = slot.id && form.querySelector(`[aria-describedby~="${slot.id}"]`);
    if (input) {
      input.setAttribute("aria-invalid", "true");
      first = first || input;
    }
  }
  if (first) first.focus();
};

ui.api = async function api(method, path, body, headers) {
  const response = await fetch(path, {
    method,
    headers: { "content-type": "application/json", ...(headers || {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let doc = null;
  try {
    doc = JSON.parse(text);
  } catch (_) {
    doc = { message: text };
  }
  return { status: response.status, ok: response.ok, doc };
};

// Fields that go with a choice (data-when) are dimmed while it is not made: they are not sent.
function refreshWhen(form) {
  for (const el of form.querySelectorAll("[data-when]")) {
    (el.closest(".field") || el).classList.toggle("inactive", !active(el));
  }
}

// A 202 is a job (a plan past what a request answers, service.jobs): follow it at GET /v1/jobs/{id} once a second,
// its progress in the form's bar and status, until it ends; then its result is the endpoint's answer, or its error
// the endpoint's error. Null when another submission of the form took over.
const JOB_POLL_MS = 1000;

ui.followJob = async function followJob(form, job, headers, progress, status) {
  const mine = job.id;
  form.dataset.job = mine;
  form.dataset.state = "job";
  for (;;) {
    if (form.dataset.job !== mine) return null;
    const { done, total } = job.progress;
    if (progress) {
      progress.hidden = false;
      if (total) {
        progress.max = total;
        progress.value = done;
      }
    }
    if (status) {
      status.textContent = job.state === "queued"
        ? `Queued as job ${job.id} (too big for one request: it runs in the background)`
        : `Running as job ${job.id}: ${done} of ${total}`;
    }
    if (job.state === "succeeded") return { status: 200, ok: true, doc: job.result };
    if (job.state === "failed") return { status: job.error_status, ok: false, doc: job.error };
    if (job.state === "cancelled") return { status: 409, ok: false, doc: { message: `job ${job.id} was cancelled` } };
    await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
    if (form.dataset.job !== mine) return null;
    const next = await ui.api("GET", `/v1/jobs/${job.id}`, undefined, headers);
    if (!next.ok) return next;
    job = next.doc;
  }
};

// Submit a form to its endpoint; `show` renders a 2xx answer. Errors go beside their fields.
function wire(form, show, headers) {
  refreshWhen(form);
  form.addEventListener("change", () => refreshWhen(form));
  const progress = form.querySelector("progress");
  const status = form.querySelector('[role="status"]');
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    ui.clearErrors(form);
    form.dataset.state = "working";
    form.dataset.job = "";  // a job an earlier submission follows is no longer shown
    const body = ui.collect(form);
    if (progress) progress.hidden = false;
    if (status) status.textContent = "Working…";
    const started = performance.now();
    let answer;
    const sent = headers ? headers(form) : undefined;
    try {
      answer = await ui.api("POST", form.dataset.endpoint, body, sent);
      if (answer.status === 202) answer = await ui.followJob(form, answer.doc, sent, progress, status);
    } catch (err) {
      if (progress) progress.hidden = true;
      throw err;
    }
    if (answer === null) return;  // a later submission took over
    if (progress) {
      progress.hidden = true;
      progress.removeAttribute("value");
    }
    const apiMs = performance.now() - started;
    if (!answer.ok) {
      if (status) status.textContent = `Not done: ${answer.status}`;
      ui.showErrors(form, answer.status, answer.doc);
      form.dataset.state = "error";
      return;
    }
    show(answer.doc, body);
    const totalMs = performance.now() - started;
    // Read by the browser test and shown to the user: the API call, and the call plus rendering.
    ui.timing = { api_ms: apiMs, total_ms: totalMs };
    if (status) status.textContent = `Done in ${(totalMs / 1000).toFixed(2)} s`;
    form.dataset.state = "done";
  });
}

// ---- small helpers ---------------------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function fmt(x, digits = 3) {
  if (x === null || x === undefined) return "—";
  const text = Number(x).toPrecision(digits);
  if (text.includes("e")) return text.replace(/\.?0+e/, "e");
  return text.includes(".") ? text.replace(/\.?0+$/, "") : text;
}

// Seconds with an SI prefix, for log axes that span decades (1e-5 → "10 µs").
function seconds(v) {
  if (v === null || v === undefined) return "";
  for (const [scale, unit] of [[1, "s"], [1e-3, "ms"], [1e-6, "µs"], [1e-9, "ns"]]) {
    if (Math.abs(v) >= scale * 0.9999) return `${fmt(v / scale)} ${unit}`;
  }
  return `${fmt(v)} s`;
}

function money(x) {
  return x === null || x === undefined ? "—" : `$${Number(x).toFixed(2)}`;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) {
    const area = el("textarea", {}, text);
    document.body.append(area);
    area.select();
    const done = document.execCommand("copy");
    area.remove();
    return done;
  }
}

function codeBlock(title, text) {
  const pre = el("pre", { tabindex: "0" }, el("code", { text }));
  const button = el("button", { type: "button", class: "copy", text: "Copy" });
  button.setAttribute("aria-label", `Copy ${title}`);
  button.addEventListener("click", async () => {
    const done = await copyText(text);
    button.textContent = done ? "Copied" : "Copy failed";
    button.dataset.copied = done ? "true" : "false";
  });
  return el("div", { class: "code" }, el("div", { class: "code-head" }, el("span", { text: title }), button), pre);
}

function padded(u, min, max) {
  const pad = (max - min) * 0.05 || Math.abs(max) * 0.05 || 1;
  return [min - pad, max + pad];
}

function chart(target, opts, data) {
  target.replaceChildren();
  const width = Math.max(320, Math.min(target.clientWidth || 800, 960));
  return new uPlot({ width, height: 320, ...opts }, data, target);
}

// ---- the plan ------------------------------------------------------------------------------------------------

function showExport(candidate) {
  const section = document.getElementById("export");
  const body = document.getElementById("export-body");
  document.getElementById("export-label").textContent = candidate.label;
  body.replaceChildren();
  const ex = candidate.export;
  for (const [engine, launches] of [["vLLM", ex.vllm], ["TensorRT-LLM", ex.trtllm]]) {
    for (const launch of launches) {
      const what = `${engine} ${launch.role} × ${launch.instances}`;
      body.append(codeBlock(`${what}: command`, launch.command));
      if (launch.config_yaml) body.append(codeBlock(`${what}: YAML`, launch.config_yaml));
    }
  }
  if (ex.trtllm_disaggregated_yaml) body.append(codeBlock("trtllm-serve disaggregated -c", ex.trtllm_disaggregated_yaml));
  if (ex.notes.length) body.append(el("ul", { class: "notes" }, ...ex.notes.map((n) => el("li", { text: n }))));
  section.hidden = false;
  for (const row of document.querySelectorAll("#fleets tbody tr")) {
    row.setAttribute("aria-selected", String(row.dataset.label === candidate.label));
  }
}

function showPlan(doc) {
  const rows = doc.feasible.length ? doc.feasible : doc.closest;
  const byLabel = new Map(rows.map((c) => [c.label, c]));
  document.getElementById("plan-heading").textContent = doc.feasible.length
    ? `${doc.feasible.length} fleets meet the objectives`
    : "No fleet meets the objectives: the closest";
  document.getElementById("plan-summary").textContent =
    `${doc.model} at ${fmt(doc.demand_requests_per_s)} requests/s, ${doc.percentile}: ${doc.candidates} candidates, ` +
    `${doc.evaluated} simulated, ${doc.checked_at_traffic} checked under the traffic, ${doc.invalid_count} cannot ` +
    `run; ranked by ${doc.ranked_by}.`;
  const tbody = document.querySelector("#fleets tbody");
  tbody.replaceChildren();
  for (const c of rows) {
    const b = c.binding;
    const binding = b ? `${b.objective} ${fmt(b.predicted)} / ${fmt(b.target)} s (${fmt(b.ratio, 2)}×)` : "—";
    const button = el("button", { type: "button", class: "link", text: c.label });
    button.addEventListener("click", () => showExport(c));
    const row = el(
      "tr",
      { "data-label": c.label },
      el("td", { text: String(c.rank) }),
      el("td", {}, button),
      el("td", { text: c.hardware }),
      el("td", { text: String(c.devices), class: "num" }),
      el("td", { text: money(c.cost_per_hour), class: "num" }),
      el("td", { text: money(c.cost_per_million_tokens), class: "num" }),
      el("td", { text: binding }),
      el("td", { text: c.meets ? "yes" : "no" }),
    );
    tbody.append(row);
  }
  document.getElementById("plan-result").hidden = false;
  drawFrontier(doc.frontier, byLabel);
  if (rows.length) showExport(rows[0]);
}

function drawFrontier(points, byLabel) {
  const sorted = [...points].sort((a, b) => a.output_tokens_per_s_per_user - b.output_tokens_per_s_per_user);
  const xs = sorted.map((p) => p.output_tokens_per_s_per_user);
  const ys = sorted.map((p) => p.output_tokens_per_s_per_device);
  const hover = document.getElementById("frontier-hover");
  const describe = (p) =>
    `${p.label}: ${fmt(p.output_tokens_per_s_per_user)} tokens/s per user, ` +
    `${fmt(p.output_tokens_per_s_per_device)} per device${p.meets_at_operating_point ? "" : " (misses at its operating point)"}`;
  const plot = chart(
    document.getElementById("frontier-chart"),
    {
      // Padded, so that the end points sit inside the plot, where the pointer can reach them.
      scales: { x: { time: false, range: padded }, y: { range: (u, min, max) => [0, max * 1.1 || 1] } },
      axes: [{ label: "output tokens/s per user" }, { label: "output tokens/s per device", size: 70 }],
      series: [
        { label: "per user" },
        { label: "frontier", stroke: "#1f6feb", width: 1.5, points: { show: true, size: 9, fill: "#1f6feb" } },
      ],
      legend: { show: false },
      hooks: {
        setCursor: [
          (u) => {
            const i = u.cursor.idx;
            hover.textContent = i === null || i === undefined ? "" : describe(sorted[i]);
          },
        ],
      },
    },
    [xs, ys],
  );
  plot.over.addEventListener("click", () => {
    const i = plot.cursor.idx;
    if (i === null || i === undefined) return;
    const candidate = byLabel.get(sorted[i].label);
    hover.textContent = describe(sorted[i]) + (candidate ? "" : " — not among the fleets listed");
    if (candidate) showExport(candidate);
  });
  ui.frontier = { plot, points: sorted };
}

// ---- a deployment under load ---------------------------------------------------------------------------------

function statsRow(name, s) {
  return el(
    "tr",
    {},
    el("th", { scope: "row", text: name }),
    ...["mean", "p50", "p90", "p99"].map((k) => el("td", { class: "num", text: fmt(s[k]) })),
  );
}

function showServing(doc) {
  const summary = document.getElementById("serving-summary");
  summary.replaceChildren(
    el("li", { text: `${doc.model} on ${doc.devices} × ${doc.hardware} (${doc.mode})` }),
    el("li", { text: `${fmt(doc.requests_per_s)} requests/s, ${fmt(doc.output_tokens_per_s)} output tokens/s` }),
    el("li", { text: `${fmt(doc.output_tokens_per_s_per_device)} tokens/s per device, ${fmt(doc.output_tokens_per_s_per_user)} per user` }),
    el("li", { text: `mean batch ${fmt(doc.mean_batch)}, mean KV-cache use ${fmt(100 * doc.mean_kv_cache_use)} %, ${doc.preemptions} preemptions` }),
    el("li", { text: `goodput ${fmt(100 * doc.goodput_fraction)} % of requests` }),
  );
  const tbody = document.querySelector("#serving-latency tbody");
  tbody.replaceChildren(
    statsRow("TTFT (s)", doc.ttft_s),
    statsRow("TPOT (s)", doc.tpot_s),
    statsRow("Queue (s)", doc.queue_s),
    statsRow("End to end (s)", doc.e2e_s),
  );
  document.getElementById("serving-result").hidden = false;
  const series = doc.series || [];
  const t = series.map((p) => p.start_s);
  const opts = (ylabel, label, stroke) => ({
    scales: { x: { time: false } },
    axes: [{ label: "time (s)" }, { label: ylabel, size: 60 }],
    series: [{ label: "t (s)" }, { label, stroke, width: 1 }],
  });
  ui.serving = {
    batch: chart(document.getElementById("chart-batch"), opts("sequences", "decoding", "#1f6feb"), [t, series.map((p) => p.decoding)]),
    prefill: chart(document.getElementById("chart-prefill"), opts("tokens", "prefill tokens", "#bc4c00"), [t, series.map((p) => p.prefill_tokens)]),
    kv: chart(document.getElementById("chart-kv"), opts("fraction", "KV-cache use", "#8250df"), [t, series.map((p) => p.kv_cache_use)]),
  };
}

// ---- measured against predicted ------------------------------------------------------------------------------

function drawAccuracy() {
  const data = JSON.parse(document.getElementById("accuracy-points").textContent);
  const target = document.getElementById("accuracy-chart");
  if (!data.length) return;
  const pts = [...data].sort((a, b) => a.predicted_s - b.predicted_s);
  const hover = document.getElementById("accuracy-hover");
  const x = pts.map((p) => p.predicted_s);
  const plot = chart(
    target,
    {
      scales: { x: { time: false, distr: 3 }, y: { distr: 3 } },
      axes: [
        { label: "predicted", values: (u, splits) => splits.map(seconds) },
        { label: "measured", size: 70, values: (u, splits) => splits.map(seconds) },
      ],
      series: [
        { label: "predicted", value: (u, v) => seconds(v) },
        { label: "measured", stroke: "#1f6feb", paths: () => null, points: { show: true, size: 7, fill: "#1f6feb" }, value: (u, v) => seconds(v) },
        { label: "y = x", stroke: "#444", width: 1, points: { show: false }, value: (u, v) => seconds(v) },
        { label: "interval low", stroke: "#9ab", width: 1, dash: [4, 4], points: { show: false }, value: (u, v) => seconds(v) },
        { label: "interval high", stroke: "#9ab", width: 1, dash: [4, 4], points: { show: false }, value: (u, v) => seconds(v) },
      ],
      bands: [{ series: [4, 3], fill: "rgba(31, 111, 235, 0.08)" }],
      hooks: {
        setCursor: [
          (u) => {
            const i = u.cursor.idx;
            const p = i === null || i === undefined ? null : pts[i];
            hover.textContent = p
              ? `result ${p.id}: ${p.hardware} ${p.family} ${p.dtype}, measured ${seconds(p.measured_s)}, ` +
                `predicted ${seconds(p.predicted_s)} (${fmt(p.measured_s / p.predicted_s)}×; band ` +
                `${fmt(p.low)}-${fmt(p.high)}× from ${p.band})` +
                (p.calibrated_s === null ? "" : `, calibrated ${seconds(p.calibrated_s)}`)
              : "";
          },
        ],
      },
    },
    [x, pts.map((p) => p.measured_s), x, pts.map((p) => p.predicted_s * p.low), pts.map((p) => p.predicted_s * p.high)],
  );
  const inside = pts.filter((p) => p.measured_s >= p.predicted_s * p.low && p.measured_s <= p.predicted_s * p.high);
  document.getElementById("accuracy-inside").textContent =
    `${inside.length} of ${pts.length} measured times (${fmt((100 * inside.length) / pts.length)} %) fall inside the band.`;
  ui.accuracy = { plot, points: pts };
}

// ---- the catalogue ---------------------------------------------------------------------------------------------

function showCreated(form) {
  return (doc) => {
    const status = form.querySelector('[role="status"]');
    if (status) status.textContent = `Added ${doc.slug} (version ${doc.version}).`;
  };
}

function catalogueForm(form) {
  // The document is JSON typed into a textarea: its fields are the schema's, so the API's errors name paths inside it.
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    ui.clearErrors(form);
    form.dataset.state = "working";
    form.dataset.job = "";  // a job an earlier submission follows is no longer shown
    const text = form.querySelector("textarea").value;
    let body;
    try {
      body = JSON.parse(text);
    } catch (err) {
      slotFor(form, "body").textContent = `Not JSON: ${err.message}`;
      form.dataset.state = "error";
      return;
    }
    if (body === null || typeof body !== "object" || Array.isArray(body)) {
      slotFor(form, "body").textContent = "The document must be a JSON object.";
      form.dataset.state = "error";
      return;
    }
    Object.assign(body, ui.collect(form));
    const key = form.querySelector('[name="api_key"]').value.trim();
    const answer = await ui.api("POST", form.dataset.endpoint, body, key ? { authorization: `Bearer ${key}` } : {});
    if (!answer.ok) {
      if (answer.status === 401 || answer.status === 403) {
        slotFor(form, "header.authorization").textContent = `${answer.status}: ${answer.doc.message}`;
      } else {
        ui.showErrors(form, answer.status, answer.doc);
      }
      form.dataset.state = "error";
      return;
    }
    showCreated(form)(answer.doc);
    form.dataset.state = "done";
  });
}

// ---- start -----------------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "plan") wire(document.getElementById("plan-form"), showPlan);
  if (page === "serving") wire(document.getElementById("serving-form"), showServing);
  if (page === "accuracy") drawAccuracy();
  if (page === "catalogue") for (const form of document.querySelectorAll(".catalogue-form")) catalogueForm(form);
  ui.ready = true;
});
