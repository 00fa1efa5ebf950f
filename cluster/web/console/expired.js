// Expired jobs: GET /v1/expired?topic=&limit= (MySQL's records, the most recent first,
// and how many there are in all). An expired job was not published by its due time plus
// its expires_after; it is not replayed (schedule it again if need be), so the view only
// lists them, each linking to the job's view.

import { call } from "./api.js";
import { explainFailure } from "./dialogs.js";
import { byId, count, fillRows, h, say, seconds, utc, utcSeconds } from "./dom.js";

let asked = 0; // the latest list asked for: an older answer arriving later is dropped

export function setUp() {
  byId("expired-form").addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
}

export function show() {
  load();
}

export function refresh() {
  load();
}

export async function load() {
  const message = byId("expired-message");
  const topic = byId("expired-topic").value.trim();
  const query = new URLSearchParams({ limit: byId("expired-limit").value });
  if (topic) query.set("topic", topic);
  const mine = ++asked;
  let answer;
  try {
    answer = await call("GET", `/v1/expired?${query}`);
  } catch (error) {
    if (mine !== asked) return;
    if (await explainFailure(error, message, "Listing the expired jobs")) load();
    return;
  }
  if (mine !== asked) return;
  say(message, "");
  const where = topic ? ` in topic ${topic}` : "";
  const listed = answer.expired;
  byId("expired-count").textContent =
    `${count(answer.count)} expired${where}` + (listed.length < answer.count ? `, showing ${count(listed.length)}` : "");
  const rows = listed.map((job) =>
    h(
      "tr",
      { "data-testid": "expired-row", "data-job-id": job.job_id },
      h("td", { class: "mono" }, h("a", { href: `#jobs/${encodeURIComponent(job.job_id)}` }, job.job_id)),
      h("td", { class: "mono" }, job.topic),
      h("td", { class: "mono" }, job.biz_id ?? "–"),
      h("td", { class: "mono nowrap", title: `${utc(job.due_ms)} UTC` }, utcSeconds(job.due_ms)),
      h("td", {}, job.expires_after === null || job.expires_after === undefined ? "–" : seconds(job.expires_after)),
      h("td", { class: "num" }, count(job.attempts)),
      h("td", { class: "error-text clip col-error", title: job.last_error || "" }, job.last_error ?? "–"),
    ),
  );
  fillRows(byId("expired-list").tBodies[0], rows, topic ? `no expired job in topic ${topic}` : "no expired job");
}
