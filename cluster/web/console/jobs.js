// The job lookup: GET /v1/jobs/{id}?history=true, cancel (DELETE /v1/jobs/{id}) and,
// for a dead job, replay (POST /v1/dead-letters/replay; also one already purged from
// the dead-letter set, which the server replays from MySQL), each after a confirmation. The id travels percent-encoded (encodeURIComponent), in the
// API path and in the page's address (#jobs/<id>), so any id can be linked to.
// When no job has the id, the same words are searched as a biz_id (search.js): every
// job of that business key is listed below.

import { fireNow, rescheduleJob } from "./actions.js";
import { call, jobPath } from "./api.js";
import { confirmChange, explainFailure } from "./dialogs.js";
import { byId, count, field, fillRows, h, pretty, relative, say, utc } from "./dom.js";
import { byBizId } from "./search.js";

// Statuses a cancel can still stop (the API answers 409 to the others).
const CANCELLABLE = new Set(["pending", "firing"]);
// Statuses a reschedule (and fire now) can still change.
const RESCHEDULABLE = new Set(["pending", "firing"]);

let shown = null; // the record on screen
let asked = 0; // the latest lookup: an older answer arriving later is dropped

export function setUp() {
  byId("job-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = byId("job-id").value;
    if (!id) return;
    const hash = `#jobs/${encodeURIComponent(id)}`;
    if (location.hash === hash) lookup(id);
    else location.hash = hash; // the router looks it up
  });
  byId("job-refresh").addEventListener("click", () => shown && lookup(shown.job_id));
  byId("job-cancel").addEventListener("click", () => shown && cancel(shown));
  byId("job-replay").addEventListener("click", () => shown && replay(shown));
  byId("job-reschedule").addEventListener("click", () => shown && change(shown, rescheduleJob));
  byId("job-fire").addEventListener("click", () => shown && change(shown, fireNow));
}

/** The view is shown, with a job id from the address or none. */
export function show(jobId) {
  if (jobId) {
    byId("job-id").value = jobId;
    lookup(jobId);
  } else {
    byId("job-id").focus();
  }
}

export function refresh() {
  if (shown) lookup(shown.job_id);
}

export async function lookup(jobId) {
  const message = byId("job-message");
  say(message, "Looking up…", "info");
  const mine = ++asked;
  let record;
  try {
    record = await call("GET", jobPath(jobId, "?history=true"));
  } catch (error) {
    if (mine !== asked) return;
    if (error.status === 404 && error.kind === "not-found") {
      shown = null;
      byId("job-result").hidden = true;
      say(message, `No job has the id '${jobId}': listed below are the jobs whose biz_id is '${jobId}'.`, "warn");
      byBizId(jobId, `Searched the id '${jobId}' (no such job), then biz_id:`);
      return;
    }
    if (await explainFailure(error, message, "Looking up the job")) lookup(jobId);
    return;
  }
  if (mine !== asked) return;
  say(message, "");
  render(record);
}

function render(job) {
  shown = job;
  byId("job-result").hidden = false;
  byId("job-title").textContent = job.job_id;
  const status = byId("job-status");
  status.textContent = job.status;
  status.className = `badge status-${job.status}`;
  byId("job-fields").replaceChildren(
    ...field("topic", job.topic, { class: "mono", "data-testid": "job-topic" }),
    // A tick of a recurring schedule: which schedule, and the tick's time.
    ...(job.recurring
      ? field(
          "recurring",
          h("a", { href: `#recurring/${encodeURIComponent(job.recurring)}` }, job.recurring),
          { class: "mono", "data-testid": "job-recurring" },
        )
      : []),
    ...(job.tick_ms !== null && job.tick_ms !== undefined ? field("tick", `${utc(job.tick_ms)} UTC`) : []),
    ...field("status", job.status, { "data-testid": "job-field-status" }),
    ...field("due", `${utc(job.due_ms)} UTC (${relative(job.due_ms)})`, { title: job.due }),
    ...field("attempts", `${count(job.attempts)} of ${count(job.max_attempts)}`),
    ...field("biz_id", job.biz_id ?? "–", { class: "mono" }),
    ...field("biz_type", job.biz_type ?? "–", { class: "mono" }),
    ...field("slot", String(job.slot)),
    ...field("last error", job.last_error ?? "–", { class: job.last_error ? "mono error-text" : "" }),
    ...field("created", `${utc(job.created_ms)} UTC`),
    ...field("modified", `${utc(job.modified_ms)} UTC`),
  );
  byId("job-payload").textContent = pretty(job.payload);
  const history = (job.history || []).map((row) =>
    h(
      "tr",
      { "data-testid": "history-row" },
      h("td", { class: "mono" }, utc(Date.parse(row.at))),
      h("td", {}, h("span", { class: `badge status-${row.status}` }, row.status)),
      h("td", { class: "num" }, row.attempt === null ? "–" : String(row.attempt)),
      h("td", { class: "mono" }, row.node ?? "–"),
      h("td", { class: "num" }, row.slot === null ? "–" : String(row.slot)),
      h("td", { class: "wrap" }, row.note ?? ""),
    ),
  );
  fillRows(byId("job-history").tBodies[0], history, "no changes recorded since it was scheduled");
  const cancel = byId("job-cancel");
  cancel.disabled = !CANCELLABLE.has(job.status);
  cancel.title = cancel.disabled ? `a ${job.status} job cannot be cancelled` : "";
  byId("job-replay").hidden = job.status !== "dead";
  for (const id of ["job-reschedule", "job-fire"]) {
    const button = byId(id);
    button.disabled = !RESCHEDULABLE.has(job.status);
    button.title = button.disabled ? `a ${job.status} job cannot be rescheduled` : "";
  }
}

/** Reschedule or fire now (actions.js), then show the job as it is after it. */
async function change(job, action) {
  const message = byId("job-message");
  const done = await action(job, message);
  if (!done) return;
  await lookup(job.job_id);
  say(message, done, "ok");
}

async function cancel(job) {
  const yes = await confirmChange({
    title: "Cancel this job?",
    text:
      `The job of topic ${job.topic}, due ${utc(job.due_ms)} UTC (${relative(job.due_ms)}), ` +
      "will never fire. MySQL keeps its row as cancelled.",
    action: "Cancel the job",
    ids: [job.job_id],
    danger: true,
  });
  if (!yes) return;
  const message = byId("job-message");
  try {
    await call("DELETE", jobPath(job.job_id));
  } catch (error) {
    if (await explainFailure(error, message, "Cancelling the job")) cancel(job);
    return;
  }
  await lookup(job.job_id);
  say(message, "Cancelled: the job will never fire.", "ok");
}

async function replay(job) {
  const yes = await confirmChange({
    title: "Replay this dead job?",
    text:
      `The job of topic ${job.topic} gets a new set of attempts and is due now: the node ` +
      "owning its slot publishes it at once. A job purged from the dead-letter set is " +
      "replayed from its MySQL row.",
    action: "Replay the job",
    ids: [job.job_id],
    danger: false,
  });
  if (!yes) return;
  const message = byId("job-message");
  let answer;
  try {
    answer = await call("POST", "/v1/dead-letters/replay", { job_ids: [job.job_id] });
  } catch (error) {
    if (await explainFailure(error, message, "Replaying the job")) replay(job);
    return;
  }
  await lookup(job.job_id);
  if (answer.replayed) say(message, "Replayed: the job is due now.", "ok");
  else say(message, "Nothing replayed: the job is no longer dead.", "warn");
}
