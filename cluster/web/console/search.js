// Browsing and searching jobs: GET /v1/jobs?topic=&status=&biz_id=&biz_type=&due_from=
// &due_to=&order=&limit=&cursor= (MySQL, every shard, a page at a time: the answer's
// next_cursor asks for the next one), each row with reschedule, fire now and cancel
// (actions.js), and "Cancel all matching" (POST /v1/jobs/cancel: first without
// `expected`, which changes nothing and answers 409 "unconfirmed" with the number that
// match and the token of that set; then, confirmed by the operator, with that number as
// `expected` and the token as `selection`: the server cancels nothing, answering 409
// again, if any job started or stopped matching since).

import { cancelJob, fireNow, rescheduleJob } from "./actions.js";
import { call } from "./api.js";
import { confirmChange, explainFailure } from "./dialogs.js";
import { byId, count, fillRows, h, relative, say, utcSeconds } from "./dom.js";

// Statuses a reschedule, fire now or cancel can still change.
const CHANGEABLE = new Set(["pending", "firing"]);

let filters = null; // the search on screen: {topic, status, biz_id, ...}
let shape = null; // its order and page size, kept while paging (a cursor is for them)
let cursors = [null]; // the cursor of each page seen; the last is the page shown
let listed = [];
let nextCursor = null;
let asked = 0; // the latest search: an older answer arriving later is dropped

export function setUp() {
  byId("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const given = fromForm();
    if (given) start(given, "");
  });
  byId("search-next").addEventListener("click", () => nextCursor && load([...cursors, nextCursor]));
  byId("search-first").addEventListener("click", () => filters && load([null]));
  byId("search-cancel-all").addEventListener("click", () => filters && cancelAll());
}

export function refresh() {
  if (filters) load(cursors);
}

/** "2026-11-26T10:00:05" from a datetime-local input, read as UTC: epoch ms, or null. */
function utcInput(id) {
  const value = byId(id).value;
  if (!value) return null;
  const ms = Date.parse(`${value.length === 16 ? `${value}:00` : value}Z`);
  return Number.isNaN(ms) ? null : ms;
}

function fromForm() {
  const given = {};
  const topic = byId("search-topic").value.trim();
  const bizId = byId("search-biz-id").value.trim();
  const bizType = byId("search-biz-type").value.trim();
  const statuses = [...byId("search-statuses").querySelectorAll("input:checked")].map((box) => box.value);
  if (topic) given.topic = topic;
  if (statuses.length) given.status = statuses.join(",");
  if (bizId) given.biz_id = bizId;
  if (bizType) given.biz_type = bizType;
  const from = utcInput("search-from");
  const to = utcInput("search-to");
  if (from !== null) given.due_from = new Date(from).toISOString();
  if (to !== null) given.due_to = new Date(to).toISOString();
  return given;
}

/** A new search: its first page; `hint` says what was searched and why. */
export function start(given, hint) {
  filters = given;
  shape = { order: byId("search-order").value, limit: byId("search-limit").value };
  byId("search-result").dataset.hint = hint;
  load([null]);
}

/** Every job of a business key (the lookup box, when no job has the id it was given). */
export function byBizId(bizId, hint) {
  byId("search-biz-id").value = bizId;
  start({ biz_id: bizId }, hint);
}

function query(cursor) {
  const params = new URLSearchParams({ ...filters, ...shape });
  if (cursor) params.set("cursor", cursor);
  return params;
}

async function load(pages) {
  const message = byId("search-message");
  const mine = ++asked;
  let answer;
  try {
    answer = await call("GET", `/v1/jobs?${query(pages[pages.length - 1])}`);
  } catch (error) {
    if (mine !== asked) return;
    if (await explainFailure(error, message, "Searching the jobs")) load(pages);
    return;
  }
  if (mine !== asked) return;
  cursors = pages;
  listed = answer.jobs;
  nextCursor = answer.next_cursor;
  say(message, "");
  render();
}

function describe(given) {
  const parts = [];
  if (given.topic) parts.push(`topic ${given.topic}`);
  parts.push(given.status ? `status ${given.status.replaceAll(",", " or ")}` : "any status");
  if (given.biz_id) parts.push(`biz_id ${given.biz_id}`);
  if (given.biz_type) parts.push(`biz_type ${given.biz_type}`);
  if (given.due_from) parts.push(`due from ${given.due_from}`);
  if (given.due_to) parts.push(`due to ${given.due_to}`);
  return parts.join(", ");
}

function render() {
  const box = byId("search-result");
  box.hidden = false;
  const page = cursors.length;
  const hint = box.dataset.hint ? `${box.dataset.hint} ` : "";
  const shown = listed.length === 1 ? "1 job" : `${count(listed.length)} jobs`;
  byId("search-count").textContent = `${hint}Jobs with ${describe(filters)}: page ${page}, ${shown}${nextCursor ? ", more on the next page" : ""}.`;
  byId("search-next").disabled = !nextCursor;
  byId("search-first").disabled = page === 1;
  const rows = listed.map((job) => {
    const changeable = CHANGEABLE.has(job.status);
    const act = (fn) => async () => {
      const done = await fn(job, byId("search-message"));
      if (!done) return;
      await load(cursors);
      say(byId("search-message"), done, "ok");
    };
    const button = (label, testid, fn, cls = "") =>
      h("button", { type: "button", class: cls, "data-testid": testid, disabled: !changeable, on: { click: act(fn) } }, label);
    return h(
      "tr",
      { "data-testid": "search-row", "data-job-id": job.job_id },
      h("td", { class: "mono" }, h("a", { href: `#jobs/${encodeURIComponent(job.job_id)}` }, job.job_id)),
      h("td", { class: "mono" }, job.topic),
      h("td", { class: "mono" }, job.biz_id ?? "–"),
      h("td", {}, h("span", { class: `badge status-${job.status}`, "data-testid": "search-status" }, job.status)),
      h("td", { class: "mono nowrap", title: relative(job.due_ms) }, utcSeconds(job.due_ms)),
      h("td", { class: "num" }, `${count(job.attempts)} of ${count(job.max_attempts)}`),
      h(
        "td",
        { class: "actions" },
        button("Reschedule…", "search-reschedule", rescheduleJob),
        button("Fire now…", "search-fire", fireNow),
        button("Cancel…", "search-cancel", cancelJob, "danger"),
      ),
    );
  });
  fillRows(byId("search-list").tBodies[0], rows, page === 1 ? "no job matches" : "no more jobs");
}

/** Cancel every job the search matches: the server counts them, the
 * operator confirms that count, and the cancel names the set counted (its token), so a
 * selection that changed in between is refused rather than cancelled. */
async function cancelAll() {
  const message = byId("search-message");
  const selection = { ...filters };
  if (selection.status) selection.status = selection.status.split(",");
  const preview = await bulkCancel(selection, null, message);
  if (preview === null || typeof preview.matched !== "number") return;
  const counted = preview.matched;
  if (counted === 0) {
    say(message, "No job matches: nothing to cancel.", "info");
    return;
  }
  const yes = await confirmChange({
    title: `Cancel ${counted === 1 ? "1 job" : `${count(counted)} jobs`}?`,
    text:
      `Every pending or retrying job the search finds (${describe(filters)}; ${count(counted)} now), on every page, ` +
      "will never fire. MySQL keeps their rows as cancelled. If jobs start or stop matching " +
      "before you confirm, nothing is cancelled.",
    action: `Cancel ${count(counted)}`,
    danger: true,
  });
  if (!yes) return;
  const answer = await bulkCancel(selection, preview, message);
  if (answer === null) return;
  await load([null]);
  const n = answer.cancelled;
  let text = `Cancelled ${count(n)} job${n === 1 ? "" : "s"}.`;
  // Jobs that fired or were cancelled between the count and the cancel, or whose
  // cancel's outcome is unknown (Redis did not answer): said, not hidden.
  if (answer.already_final) text += ` ${count(answer.already_final)} had fired or were cancelled meanwhile.`;
  if (answer.unknown) text += ` ${count(answer.unknown)} may or may not be cancelled: ${answer.unknown_job_ids.join(", ")}.`;
  say(message, text, answer.unknown ? "warn" : "ok");
}

/** POST /v1/jobs/cancel. Without a preview (null): {matched, selection} from the 409
 * "unconfirmed" answer. With it: the answer of the cancel of that set. Null after saying
 * what went wrong. */
async function bulkCancel(filter, preview, message) {
  const body = preview === null ? filter : { ...filter, expected: preview.matched, selection: preview.selection };
  try {
    return await call("POST", "/v1/jobs/cancel", body);
  } catch (error) {
    if (preview === null && error.kind === "unconfirmed" && typeof error.problem.matched === "number") {
      return { matched: error.problem.matched, selection: error.problem.selection };
    }
    if (await explainFailure(error, message, "Cancelling the jobs")) return bulkCancel(filter, preview, message);
    return null;
  }
}
