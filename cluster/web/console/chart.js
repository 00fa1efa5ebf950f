// Line charts over time, drawn as SVG: a few series sharing one time axis (the points
// of /v1/cluster/stats), a zero-based value axis with round ticks, gaps where a value
// is missing (null), and a readout of the values under the pointer.

import { clock, svg } from "./dom.js";

const MARGIN = { left: 52, right: 12, top: 10, bottom: 22 };
const MIN_SPAN_MS = 60_000; // the time axis spans at least a minute
const TIME_STEPS_S = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];

const charts = new WeakMap(); // svg element → its latest data, for the readout

/** A "nice" step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to max. */
export function niceStep(max, ticks = 4) {
  if (!(max > 0)) return 1;
  const rough = max / ticks;
  const power = 10 ** Math.floor(Math.log10(rough));
  for (const factor of [1, 2, 2.5, 5, 10]) {
    if (factor * power >= rough) return factor * power;
  }
  return 10 * power;
}

function pathOf(times, values, x, y, gapMs) {
  let d = "";
  let drawing = false;
  const dots = [];
  for (let i = 0; i < times.length; i++) {
    const value = values[i];
    if (value === null || value === undefined || !Number.isFinite(value)) {
      drawing = false;
      continue;
    }
    if (i > 0 && times[i] - times[i - 1] > gapMs) drawing = false; // nobody sampled then
    const px = x(times[i]).toFixed(1);
    const py = y(value).toFixed(1);
    d += `${drawing ? "L" : "M"}${px} ${py}`;
    const next = i + 1 < times.length ? values[i + 1] : null;
    const alone =
      !drawing && (next === null || next === undefined || times[i + 1] - times[i] > gapMs);
    if (alone) dots.push([px, py]);
    drawing = true;
  }
  return { d, dots };
}

/**
 * Draw into an <svg> element.
 *   times:  epoch milliseconds, one per point
 *   series: [{name, cls, values}], values aligned with times (null: no value)
 *   format: a value → its text (axis labels and the readout)
 *   readout: an element showing the values under the pointer
 *   gapMs:  points further apart than this are not joined (the sampler was idle)
 */
export function drawChart(element, { times, series, format, readout, gapMs = Infinity }) {
  const width = Math.max(element.clientWidth || 0, 200);
  const height = Math.max(element.clientHeight || 0, 120);
  element.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;

  const end = times.length ? times[times.length - 1] : Date.now();
  const start = Math.min(times.length ? times[0] : end, end - MIN_SPAN_MS);
  let max = 0;
  for (const s of series) {
    for (const v of s.values) if (Number.isFinite(v) && v > max) max = v;
  }
  const step = niceStep(max);
  const top = Math.max(step, Math.ceil(max / step) * step);
  const x = (t) => MARGIN.left + ((t - start) / (end - start)) * plotW;
  const y = (v) => MARGIN.top + plotH - (v / top) * plotH;

  const parts = [];
  // Value axis: grid lines and labels.
  for (let v = 0; v <= top + step / 2; v += step) {
    const py = y(v).toFixed(1);
    parts.push(svg("line", { class: "grid-line", x1: MARGIN.left, x2: width - MARGIN.right, y1: py, y2: py }));
    parts.push(svg("text", { class: "axis-label", x: MARGIN.left - 6, y: py, "text-anchor": "end", "dominant-baseline": "middle" }, format(v)));
  }
  // Time axis: ticks on round seconds, about five of them.
  const spanS = (end - start) / 1000;
  const stepS = TIME_STEPS_S.find((s) => spanS / s <= 6) || TIME_STEPS_S[TIME_STEPS_S.length - 1];
  const first = Math.ceil(start / (stepS * 1000)) * stepS * 1000;
  for (let t = first; t <= end; t += stepS * 1000) {
    const px = x(t).toFixed(1);
    parts.push(svg("line", { class: "tick", x1: px, x2: px, y1: MARGIN.top + plotH, y2: MARGIN.top + plotH + 4 }));
    parts.push(svg("text", { class: "axis-label", x: px, y: height - 4, "text-anchor": "middle" }, clock(t)));
  }
  parts.push(svg("line", { class: "axis", x1: MARGIN.left, x2: width - MARGIN.right, y1: MARGIN.top + plotH, y2: MARGIN.top + plotH }));

  let drawn = 0;
  series.forEach((s) => {
    const { d, dots } = pathOf(times, s.values, x, y, gapMs);
    if (d) {
      drawn += 1;
      parts.push(svg("path", { class: `series ${s.cls}`, d, "data-series": s.name }));
    }
    for (const [px, py] of dots) parts.push(svg("circle", { class: `dot ${s.cls}`, cx: px, cy: py, r: 2 }));
  });
  if (!drawn) {
    parts.push(
      svg("text", { class: "no-data", x: MARGIN.left + plotW / 2, y: MARGIN.top + plotH / 2, "text-anchor": "middle" },
        times.length < 2 ? "collecting the first samples…" : "no values in this window"),
    );
  }
  const cursor = svg("line", { class: "cursor", x1: 0, x2: 0, y1: MARGIN.top, y2: MARGIN.top + plotH, visibility: "hidden" });
  const overlay = svg("rect", { class: "overlay", x: MARGIN.left, y: MARGIN.top, width: plotW, height: plotH });
  parts.push(cursor, overlay);
  element.replaceChildren(...parts);
  element.dataset.points = String(times.length);

  const state = { times, series, format, readout, x, start, end, plotW, cursor };
  charts.set(element, state);
  overlay.addEventListener("pointermove", (event) => showAt(element, event));
  overlay.addEventListener("pointerleave", () => hideReadout(element));
  hideReadout(element);
}

function showAt(element, event) {
  const state = charts.get(element);
  if (!state || !state.times.length) return;
  const box = element.getBoundingClientRect();
  const scale = box.width ? element.viewBox.baseVal.width / box.width : 1;
  const px = (event.clientX - box.left) * scale;
  const t = state.start + ((px - MARGIN.left) / state.plotW) * (state.end - state.start);
  let best = 0;
  for (let i = 1; i < state.times.length; i++) {
    if (Math.abs(state.times[i] - t) < Math.abs(state.times[best] - t)) best = i;
  }
  const cx = state.x(state.times[best]).toFixed(1);
  state.cursor.setAttribute("x1", cx);
  state.cursor.setAttribute("x2", cx);
  state.cursor.setAttribute("visibility", "visible");
  if (state.readout) {
    const values = state.series.map((s) => {
      const v = s.values[best];
      return `${s.name} ${v === null || v === undefined ? "–" : state.format(v)}`;
    });
    state.readout.textContent = `${clock(state.times[best])}  ${values.join("  ")}`;
  }
}

function hideReadout(element) {
  const state = charts.get(element);
  if (!state) return;
  state.cursor.setAttribute("visibility", "hidden");
  if (state.readout) {
    const last = state.times.length - 1;
    if (last < 0) {
      state.readout.textContent = "";
      return;
    }
    const values = state.series.map((s) => {
      const v = s.values[last];
      return `${s.name} ${v === null || v === undefined ? "–" : state.format(v)}`;
    });
    state.readout.textContent = `latest ${clock(state.times[last])}  ${values.join("  ")}`;
  }
}
