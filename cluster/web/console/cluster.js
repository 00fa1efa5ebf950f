// The cluster view: GET /v1/cluster/stats every interval_s while the view is shown.
//
// snapshot: what `delayq top` shows (members from ZooKeeper with their health and fire
// rate from their /metrics, per-topic rates and lateness, every slot's owner and depths
// from ZooKeeper and Redis, totals); points: the figures over the last 15 minutes.

import { call } from "./api.js";
import { drawChart } from "./chart.js";
import { explainFailure } from "./dialogs.js";
import { byId, count, fillRows, h, millis, rate, say, utc } from "./dom.js";

const OWNER_COLOURS = 10; // .own0 … .own9 in console.css
const DETAILED_SLOTS = 64; // up to this many slots, each cell shows its figures
const DEFAULT_INTERVAL_S = 2;

let running = false;
let timer = null;
let inFlight = false;
let latest = null; // the last answer
let selectedSlot = null;

export function start() {
  if (running) return;
  running = true;
  tick();
}

export function stop() {
  running = false;
  clearTimeout(timer);
  timer = null;
}

/** Refresh now (a token was set): restart the loop if the view is shown. */
export function refresh() {
  if (!running) return;
  clearTimeout(timer);
  tick();
}

function later(seconds) {
  clearTimeout(timer);
  if (running) timer = setTimeout(tick, seconds * 1000);
}

async function tick() {
  if (!running || inFlight) return;
  if (document.hidden) {
    later(DEFAULT_INTERVAL_S); // nobody looks: ask again when the tab is shown
    return;
  }
  inFlight = true;
  const message = byId("cluster-message");
  let data;
  try {
    data = await call("GET", "/v1/cluster/stats");
  } catch (error) {
    inFlight = false;
    if (error.status === 401 || error.status === 403) {
      // Asking again every 2 s would not help: wait for a token.
      if (await explainFailure(error, message, "Reading the cluster")) {
        tick();
      }
      return;
    }
    await explainFailure(error, message, "Reading the cluster");
    byId("updated").textContent = latest ? "refresh failed; showing older figures" : "";
    later(DEFAULT_INTERVAL_S);
    return;
  }
  inFlight = false;
  latest = data;
  try {
    render(data);
  } finally {
    later(data.interval_s || DEFAULT_INTERVAL_S);
  }
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && running) refresh();
});

window.addEventListener("resize", () => {
  if (latest && running) drawCharts(latest.points || [], latest.interval_s);
});

// ----- rendering -----------------------------------------------------------------------

function render(data) {
  const message = byId("cluster-message");
  const snapshot = data.snapshot;
  if (!snapshot) {
    say(message, `The cluster's figures are unavailable: ${data.error || "no sample yet"}.`, "error");
    drawCharts(data.points || [], data.interval_s);
    return;
  }
  if (data.error) {
    say(message, `The latest sample failed, showing an older one: ${data.error}.`, "warn");
  } else if (!snapshot.members.length) {
    say(message, "No member: no node is running in this cluster, so no slot is served.", "warn");
  } else {
    say(message, "");
  }
  const points = data.points || [];
  const at = points.length ? points[points.length - 1].at_ms : Date.now();
  byId("updated").textContent = `updated ${utc(at).slice(11, 19)} UTC`;
  byId("cluster-root").textContent = `${snapshot.root} · ${count(snapshot.slots)} slots`;

  const owners = ownerIndex(snapshot.members);
  renderTiles(snapshot);
  drawCharts(points, data.interval_s);
  renderMembers(snapshot, owners);
  renderTopics(snapshot);
  renderSlots(snapshot, owners);
}

function ownerIndex(members) {
  const index = new Map();
  members.forEach((member, i) => index.set(member.member, i % OWNER_COLOURS));
  return index;
}

function renderTiles(s) {
  const owned = s.slot_status.filter((slot) => slot.owner && s.members.some((m) => m.member === slot.owner)).length;
  const hasWindow = s.window_s > 0;
  byId("t-members").textContent = count(s.members.length);
  setTile("t-slots", count(owned), owned < s.slots ? "warn" : "");
  byId("t-slots-of").textContent = `of ${count(s.slots)}`;
  byId("t-rate").textContent = hasWindow ? rate(s.fire_rate) : "–";
  byId("t-p50").textContent = millis(s.p50_ms);
  byId("t-p99").textContent = millis(s.p99_ms);
  byId("t-delay").textContent = count(s.delay);
  byId("t-ready").textContent = count(s.ready);
  byId("t-inflight").textContent = count(s.inflight);
  setTile("t-dead", count(s.dead), s.dead > 0 ? "bad" : "");
  setTile("t-overdue", s.oldest_overdue_ms ? millis(s.oldest_overdue_ms) : "none", s.oldest_overdue_ms >= 1000 ? "warn" : "");
}

function setTile(id, text, kind) {
  const element = byId(id);
  element.textContent = text;
  element.closest(".tile").classList.toggle("warn", kind === "warn");
  element.closest(".tile").classList.toggle("bad", kind === "bad");
}

function drawCharts(points, intervalS) {
  const times = points.map((p) => p.at_ms);
  const gapMs = 3 * 1000 * (intervalS || DEFAULT_INTERVAL_S);
  const column = (name) => points.map((p) => (p[name] === undefined ? null : p[name]));
  drawChart(byId("chart-rate"), {
    times,
    series: [{ name: "fired/s", cls: "s0", values: column("fire_rate") }],
    format: rate,
    readout: byId("chart-rate-readout"),
    gapMs,
  });
  drawChart(byId("chart-lateness"), {
    times,
    series: [
      { name: "p50", cls: "s0", values: column("p50_ms") },
      { name: "p99", cls: "s1", values: column("p99_ms") },
    ],
    format: millis,
    readout: byId("chart-lateness-readout"),
    gapMs,
  });
  drawChart(byId("chart-depth"), {
    times,
    series: [
      { name: "delayed", cls: "s0", values: column("delay") },
      { name: "ready", cls: "s1", values: column("ready") },
      { name: "in flight", cls: "s2", values: column("inflight") },
      { name: "dead", cls: "s3", values: column("dead") },
    ],
    format: count,
    readout: byId("chart-depth-readout"),
    gapMs,
  });
}

function yesNo(value, metrics) {
  if (metrics !== "ok") return h("span", { class: "badge muted", title: "the node's /metrics" }, `metrics ${metrics}`);
  if (value === null || value === undefined) return h("span", { class: "badge muted" }, "–");
  return value ? h("span", { class: "badge ok" }, "yes") : h("span", { class: "badge bad" }, "NO");
}

function renderMembers(s, owners) {
  const rows = s.members.map((m) =>
    h(
      "tr",
      { "data-testid": "member-row", "data-node-id": m.node_id || "" },
      h("td", { class: "mono" }, h("span", { class: `swatch own${owners.get(m.member)}`, "aria-hidden": "true" }), m.member),
      h("td", { class: "mono", "data-testid": "member-node" }, m.node_id || "–"),
      h("td", { class: "mono" }, m.host || "–"),
      h("td", { class: "num" }, m.pid === null || m.pid === undefined ? "–" : String(m.pid)),
      h("td", { class: "num", "data-testid": "member-slots" }, count(m.slots)),
      h("td", {}, yesNo(m.healthy, m.metrics)),
      h("td", {}, m.metrics === "ok" ? yesNo(m.ready, m.metrics) : h("span", { class: "badge muted" }, "–")),
      h("td", { class: "num", "data-testid": "member-rate" }, rate(m.fire_rate)),
    ),
  );
  fillRows(byId("members").tBodies[0], rows, "no member: no node runs in this cluster");
}

function renderTopics(s) {
  byId("topics-window").textContent = s.window_s > 0 ? `(rates over the last ${s.window_s.toFixed(1)} s)` : "";
  const rows = s.topics.map((t) =>
    h(
      "tr",
      { "data-testid": "topic-row" },
      h("td", { class: "mono" }, t.topic),
      h("td", { class: "num" }, rate(t.fire_rate)),
      h("td", { class: "num" }, millis(t.p50_ms)),
      h("td", { class: "num" }, millis(t.p99_ms)),
      h("td", { class: "num" }, count(t.fired_total)),
    ),
  );
  fillRows(byId("topics").tBodies[0], rows, "nothing fired since the nodes started (or their metrics are off)");
}

// ----- the slot map ------------------------------------------------------------------------

/** The shade of a slot: 0 when empty, then one step per power of ten (1, 10, 100, 1,000+). */
function heat(queued) {
  if (queued <= 0) return 0;
  return Math.min(4, 1 + Math.floor(Math.log10(queued)));
}

function slotLabel(slot, ownerName) {
  const parts = [`slot ${slot.slot}`, `owner ${ownerName}`];
  parts.push(`${count(slot.delay)} delayed`, `${count(slot.ready)} ready`, `${count(slot.inflight)} in flight`);
  parts.push(`${count(slot.dead)} dead`);
  if (slot.overdue_ms) parts.push(`oldest overdue ${millis(slot.overdue_ms)}`);
  return parts.join(", ");
}

function renderSlots(s, owners) {
  const map = byId("slot-map");
  const detailed = s.slots <= DETAILED_SLOTS;
  map.className = `slotmap ${detailed ? "detailed" : "compact"} cols-${Math.min(s.slots, 16)}`;
  if (map.children.length !== s.slot_status.length) {
    map.replaceChildren(
      ...s.slot_status.map((slot) =>
        h("button", {
          type: "button",
          "data-testid": "slot-cell",
          "data-slot": String(slot.slot),
          on: { click: () => selectSlot(slot.slot) },
        }),
      ),
    );
  }
  const members = new Set(s.members.map((m) => m.member));
  const nodes = new Map(s.members.map((m) => [m.member, m.node_id || m.member]));
  s.slot_status.forEach((slot, i) => {
    const cell = map.children[i];
    const live = slot.owner !== null && members.has(slot.owner);
    const ownerName = live ? nodes.get(slot.owner) : slot.owner ? `${slot.owner_node || slot.owner} (gone)` : "none";
    const queued = slot.delay + slot.ready + slot.inflight;
    cell.className = [
      "slot",
      live ? `own${owners.get(slot.owner)}` : "orphan",
      `heat${heat(queued)}`,
      slot.dead > 0 ? "has-dead" : "",
      slot.overdue_ms >= 1000 ? "overdue" : "",
      selectedSlot === slot.slot ? "selected" : "",
    ]
      .filter(Boolean)
      .join(" ");
    cell.dataset.ownerNode = live ? slot.owner_node || "" : "";
    cell.dataset.depth = String(queued);
    cell.dataset.dead = String(slot.dead);
    const label = slotLabel(slot, ownerName);
    cell.setAttribute("aria-label", label);
    cell.title = label;
    cell.setAttribute("aria-pressed", selectedSlot === slot.slot ? "true" : "false");
    if (detailed) {
      cell.replaceChildren(
        h("span", { class: "slot-no" }, `#${slot.slot}`),
        h("span", { class: "slot-owner mono" }, ownerName),
        h("span", { class: "slot-depth" }, count(queued)),
        h(
          "span",
          { class: "slot-flags" },
          slot.dead ? h("span", { class: "flag-dead" }, `${count(slot.dead)} dead`) : "",
          slot.overdue_ms >= 1000 ? h("span", { class: "flag-overdue" }, `late ${millis(slot.overdue_ms)}`) : "",
        ),
      );
    } else {
      cell.replaceChildren();
    }
  });
  const unowned = s.slot_status.filter((slot) => !(slot.owner && members.has(slot.owner))).length;
  byId("slots-sub").textContent = unowned
    ? `(${count(s.slots)} slots, ${count(unowned)} without a live owner)`
    : `(${count(s.slots)} slots)`;
  renderLegend(s, owners);
  renderSlotDetail(s, nodes, members);
}

function renderLegend(s, owners) {
  const items = s.members.map((m) =>
    h("span", { class: "legend-item" }, h("span", { class: `swatch own${owners.get(m.member)}` }), h("span", { class: "mono" }, m.node_id || m.member)),
  );
  items.push(h("span", { class: "legend-item" }, h("span", { class: "swatch orphan" }), "no live owner"));
  items.push(h("span", { class: "legend-item" }, h("span", { class: "swatch heat-scale" }), "jobs queued: 1, 10, 100, 1,000+"));
  items.push(h("span", { class: "legend-item" }, h("span", { class: "swatch dead-mark" }), "dead letters"));
  items.push(h("span", { class: "legend-item" }, h("span", { class: "swatch overdue-mark" }), "overdue ≥ 1 s"));
  byId("slot-legend").replaceChildren(...items);
}

function selectSlot(slot) {
  selectedSlot = selectedSlot === slot ? null : slot;
  if (latest && latest.snapshot) render(latest);
}

function renderSlotDetail(s, nodes, members) {
  const aside = byId("slot-detail");
  const slot = selectedSlot === null ? null : s.slot_status[selectedSlot];
  if (!slot) {
    aside.replaceChildren(h("p", { class: "hint" }, "Select a slot to see its owner and depths."));
    return;
  }
  const live = slot.owner !== null && members.has(slot.owner);
  const row = (name, value, cls) => [h("dt", {}, name), h("dd", { class: cls || "" }, value)];
  aside.replaceChildren(
    h("h3", {}, `Slot ${slot.slot}`),
    h(
      "dl",
      { class: "fields", "data-testid": "slot-fields" },
      row("owner node", live ? nodes.get(slot.owner) : slot.owner_node || "none", "mono"),
      row("member", slot.owner ? `${slot.owner}${live ? "" : " (not a member)"}` : "none", "mono"),
      row("epoch", `${slot.epoch} (ZooKeeper), ${slot.redis_epoch} (Redis)`),
      row("delayed", count(slot.delay), "num"),
      row("ready", count(slot.ready), "num"),
      row("in flight", count(slot.inflight), "num"),
      row("dead", count(slot.dead), "num"),
      row("oldest overdue", slot.overdue_ms ? millis(slot.overdue_ms) : "none", "num"),
    ),
  );
}
