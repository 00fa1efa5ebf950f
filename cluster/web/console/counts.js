// Pending jobs as MySQL has them: GET /v1/jobs/counts, read while the cluster view is
// shown (the server shares one count among all readers for a few seconds). The total and
// each topic are split into due within the Redis horizon ("in Redis": there, or loaded
// by the owning node before they are due) and beyond it (in MySQL alone); "~" marks a
// figure that is partly InnoDB's estimate.

import { call } from "./api.js";
import { explainFailure } from "./dialogs.js";
import { byId, count, fillRows, h, say, seconds } from "./dom.js";

const INTERVAL_S = 5;

let running = false;
let timer = null;
let inFlight = false;

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

function approx(tiers, value) {
  return `${tiers.approximate ? "~" : ""}${count(value)}`;
}

async function tick() {
  if (!running || inFlight) return;
  inFlight = true;
  let data = null;
  try {
    if (!document.hidden) data = await call("GET", "/v1/jobs/counts");
  } catch (error) {
    // 401 and 403 are said by the cluster view's own call; say the rest here.
    if (error.status !== 401 && error.status !== 403) {
      await explainFailure(error, byId("cluster-message"), "Counting the pending jobs");
    }
  } finally {
    inFlight = false;
  }
  if (data) render(data);
  clearTimeout(timer);
  if (running) timer = setTimeout(tick, INTERVAL_S * 1000);
}

function render(data) {
  const total = data.total;
  byId("t-pending").textContent = approx(total, total.in_redis + total.beyond_horizon);
  byId("t-pending-split").textContent =
    `${approx(total, total.in_redis)} in Redis · ${approx(total, total.beyond_horizon)} beyond horizon`;
  const more = data.more_topics ? `, the ${count(data.topics.length)} biggest topics` : "";
  byId("pending-sub").textContent =
    `(MySQL; horizon ${seconds(data.horizon_ms / 1000)}${more}${total.approximate ? "; ~ partly estimated" : ""})`;
  const rows = data.topics.map((t) =>
    h(
      "tr",
      { "data-testid": "pending-row", "data-topic": t.topic },
      h("td", { class: "mono" }, t.topic),
      h("td", { class: "num", "data-testid": "pending-topic-total" }, approx(t, t.in_redis + t.beyond_horizon)),
      h("td", { class: "num", "data-testid": "pending-topic-redis" }, approx(t, t.in_redis)),
      h("td", { class: "num", "data-testid": "pending-topic-beyond" }, approx(t, t.beyond_horizon)),
    ),
  );
  fillRows(byId("pending-topics").tBodies[0], rows, "no pending job");
  if (byId("cluster-message").textContent.startsWith("Counting the pending jobs")) say(byId("cluster-message"), "");
}
