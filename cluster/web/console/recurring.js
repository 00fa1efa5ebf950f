// Recurring schedules: GET /v1/recurring[?removed=true] (the list), and remove
// (DELETE /v1/recurring/{name}) after a confirmation. A schedule's name in the address
// (#recurring/<percent-encoded name>) opens it beside the list, with its payload and a
// link to the last tick made into a job; there it can be paused or resumed
// (POST /v1/recurring/{name}/pause|resume), run once now (…/run), each after a
// confirmation, and its ticks are listed newest first (GET …/ticks, "More" pages on).

import { call, recurringPath } from "./api.js";
import { confirmChange, explainFailure } from "./dialogs.js";
import { byId, count, field, fillRows, h, markCurrent, pretty, relative, say, seconds, utc, utcSeconds } from "./dom.js";

let listed = []; // the schedules on screen
let openName = null; // the schedule shown beside the list
let asked = 0; // the latest list asked for: an older answer arriving later is dropped
let ticksCursor = null; // where the next page of the open schedule's ticks starts
let ticksAsked = 0; // the latest ticks page asked for
const TICKS_PAGE = 20;

export function setUp() {
  byId("recurring-form").addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
  byId("recurring-removed").addEventListener("change", () => load());
  byId("recurring-detail-close").addEventListener("click", () => {
    location.hash = "#recurring";
  });
  byId("recurring-remove").addEventListener("click", () => {
    const schedule = listed.find((s) => s.name === openName);
    if (schedule) remove(schedule);
  });
  byId("recurring-pause").addEventListener("click", () => {
    const schedule = listed.find((s) => s.name === openName);
    if (schedule) pauseOrResume(schedule);
  });
  byId("recurring-run").addEventListener("click", () => {
    const schedule = listed.find((s) => s.name === openName);
    if (schedule) runNow(schedule);
  });
  byId("recurring-ticks-more").addEventListener("click", () => {
    if (openName !== null) loadTicks(openName, ticksCursor);
  });
}

/** The view is shown, with a schedule's name from the address or none. */
export function show(name) {
  openName = name || null;
  load();
}

export function refresh() {
  load();
}

/** "cron 0 9 * * 1-5 (Europe/Berlin)" or "every 5 min 0 s". */
function cadence(schedule) {
  if (schedule.cron !== null) return `cron ${schedule.cron} (${schedule.tz})`;
  return `every ${seconds(schedule.every_s)}`;
}

export async function load() {
  const message = byId("recurring-message");
  const removed = byId("recurring-removed").checked;
  const mine = ++asked;
  let answer;
  try {
    answer = await call("GET", `/v1/recurring${removed ? "?removed=true" : ""}`);
  } catch (error) {
    if (mine !== asked) return;
    if (await explainFailure(error, message, "Listing the recurring schedules")) load();
    return;
  }
  if (mine !== asked) return;
  if (message.classList.contains("error") || message.classList.contains("warn")) say(message, "");
  listed = answer.recurring;
  render();
  const wanted = openName;
  const open = listed.find((s) => s.name === wanted);
  if (open) {
    showOne(open);
    return;
  }
  closeOne();
  if (wanted !== null) {
    say(message, `No recurring schedule ${wanted}${removed ? "" : " (removed ones are hidden)"}.`, "warn");
  }
}

function render() {
  const active = listed.filter((s) => !s.removed).length;
  byId("recurring-count").textContent =
    `${count(active)} schedule${active === 1 ? "" : "s"}` +
    (listed.length > active ? `, ${count(listed.length - active)} removed` : "");
  const rows = listed.map((s) =>
    h(
      "tr",
      { "data-testid": "recurring-row", "data-name": s.name, class: [s.name === openName && "current", s.removed && "removed"] },
      h(
        "td",
        { class: "mono" },
        h("a", { class: "link mono", href: `#recurring/${encodeURIComponent(s.name)}`, "data-testid": "recurring-show" }, s.name),
      ),
      h("td", { class: "mono" }, s.topic),
      h("td", { class: "mono" }, cadence(s)),
      h(
        "td",
        { class: "mono nowrap", title: s.next_ms === null ? "" : relative(s.next_ms) },
        s.removed
          ? h("span", { class: "badge muted" }, "removed")
          : s.paused
            ? h("span", { class: "badge paused", "data-testid": "recurring-paused" }, "paused")
            : s.next_ms === null
              ? "no more"
              : utcSeconds(s.next_ms),
      ),
      h("td", {}, s.missed),
      h("td", {}, s.expires_after_s === null ? "–" : seconds(s.expires_after_s)),
      h("td", { class: "num" }, String(s.generation)),
    ),
  );
  fillRows(byId("recurring-list").tBodies[0], rows, "no recurring schedule");
}

function showOne(s) {
  // The last tick made into a job, which the job view shows with its history.
  const lastTick =
    s.last_made_ms === null
      ? "–"
      : h(
          "a",
          { href: `#jobs/${encodeURIComponent(`@recurring:${s.name}:${s.generation}:${s.last_made_ms}`)}`, "data-testid": "recurring-last-tick" },
          `${utc(s.last_made_ms)} UTC`,
        );
  byId("recurring-title").textContent = s.name;
  byId("recurring-fields").replaceChildren(
    ...field("topic", s.topic, { class: "mono" }),
    ...field("cadence", cadence(s), { class: "mono", "data-testid": "recurring-cadence" }),
    ...field("next tick", s.next_ms === null ? "no more" : `${utc(s.next_ms)} UTC (${relative(s.next_ms)})`),
    ...field("starts", s.start_ms === null ? "–" : `${utc(s.start_ms)} UTC`),
    ...field("ends", s.end_ms === null ? "–" : `${utc(s.end_ms)} UTC`),
    ...field("missed ticks", s.missed === "skip" ? "skip" : "fire the last once"),
    ...field("expires after", s.expires_after_s === null ? "never" : seconds(s.expires_after_s)),
    ...field("max attempts", count(s.max_attempts)),
    ...field("biz_id", s.biz_id ?? "–", { class: "mono" }),
    ...field("biz_type", s.biz_type ?? "–", { class: "mono" }),
    ...field("generation", String(s.generation)),
    ...field("made until", s.made_until_ms === null ? "–" : `${utc(s.made_until_ms)} UTC`),
    ...field("last tick made", lastTick),
    ...field("status", s.removed ? "removed" : s.paused ? `paused since ${utc(s.paused_ms)} UTC` : "active", {
      "data-testid": "recurring-status",
    }),
  );
  const pause = byId("recurring-pause");
  pause.textContent = s.paused ? "Resume…" : "Pause…";
  pause.hidden = s.removed;
  byId("recurring-run").hidden = s.removed;
  loadTicks(s.name, null);
  byId("recurring-payload").textContent = pretty(s.payload);
  byId("recurring-remove").hidden = s.removed;
  byId("recurring-detail").hidden = false;
  markOpen();
}

function closeOne() {
  byId("recurring-detail").hidden = true;
  openName = null;
  markOpen();
}

function markOpen() {
  markCurrent(byId("recurring-list"), "name", openName);
}

async function remove(schedule) {
  const yes = await confirmChange({
    title: `Remove the schedule ${schedule.name}?`,
    text:
      `It makes no more ticks to ${schedule.topic}. Its ticks that are jobs already and due ` +
      "from now on are cancelled (one being published at this very moment fires). " +
      "Putting the name again starts a new generation.",
    action: "Remove the schedule",
    ids: [schedule.name],
    danger: true,
  });
  if (!yes) return;
  const message = byId("recurring-message");
  try {
    await call("DELETE", recurringPath(schedule.name));
  } catch (error) {
    if (await explainFailure(error, message, "Removing the schedule")) remove(schedule);
    return;
  }
  // The address no longer names it (without a hashchange, which would reload).
  history.replaceState(null, "", "#recurring");
  openName = null;
  await load();
  say(message, `Removed ${schedule.name}: it makes no more ticks.`, "ok");
}

async function pauseOrResume(schedule) {
  const resume = schedule.paused;
  const yes = await confirmChange({
    title: `${resume ? "Resume" : "Pause"} the schedule ${schedule.name}?`,
    text: resume
      ? "It ticks again from its next tick after now. The ticks it would have made while " +
        "paused never fire."
      : "It makes no ticks until resumed. Its ticks that are jobs already and due from now " +
        "on are cancelled (one being published at this very moment fires).",
    action: resume ? "Resume the schedule" : "Pause the schedule",
    ids: [schedule.name],
    danger: !resume,
  });
  if (!yes) return;
  const message = byId("recurring-message");
  const action = resume ? "resume" : "pause";
  try {
    await call("POST", `${recurringPath(schedule.name)}/${action}`, {});
  } catch (error) {
    if (await explainFailure(error, message, `${resume ? "Resuming" : "Pausing"} the schedule`)) {
      pauseOrResume(schedule);
    }
    return;
  }
  await load();
  say(message, resume ? `Resumed ${schedule.name}.` : `Paused ${schedule.name}: no ticks until resumed.`, "ok");
}

async function runNow(schedule) {
  const yes = await confirmChange({
    title: `Run the schedule ${schedule.name} now?`,
    text:
      `One extra job, due now, fires to ${schedule.topic} with the schedule's payload. ` +
      "Its regular ticks do not change.",
    action: "Run now",
    ids: [schedule.name],
    danger: false,
  });
  if (!yes) return;
  const message = byId("recurring-message");
  let answer;
  try {
    answer = await call("POST", `${recurringPath(schedule.name)}/run`, {});
  } catch (error) {
    if (await explainFailure(error, message, "Running the schedule now")) runNow(schedule);
    return;
  }
  say(message, `Ran ${schedule.name} now: job ${answer.job_id}.`, "ok");
  if (openName === schedule.name) loadTicks(schedule.name, null);
}

/** The open schedule's ticks, newest first: the first page, or the one after `cursor`. */
async function loadTicks(name, cursor) {
  const mine = ++ticksAsked;
  const query = `?limit=${TICKS_PAGE}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`;
  let answer;
  try {
    answer = await call("GET", `${recurringPath(name)}/ticks${query}`);
  } catch (error) {
    if (mine !== ticksAsked) return;
    if (await explainFailure(error, byId("recurring-message"), "Listing the ticks")) loadTicks(name, cursor);
    return;
  }
  if (mine !== ticksAsked || name !== openName) return;
  const body = byId("recurring-ticks").tBodies[0];
  const rows = answer.ticks.map((job) =>
    h(
      "tr",
      { "data-testid": "recurring-tick", "data-id": job.job_id },
      h("td", { class: "mono nowrap" }, utcSeconds(job.due_ms)),
      h("td", {}, h("span", { class: `badge status-${job.status}`, "data-testid": "recurring-tick-status" }, job.status)),
      h(
        "td",
        { class: "mono" },
        h("a", { class: "link mono", href: `#jobs/${encodeURIComponent(job.job_id)}` }, job.job_id),
        job.job_id.endsWith("r") ? h("span", { class: "badge muted" }, "run now") : "",
      ),
    ),
  );
  if (cursor === null) fillRows(body, rows, "no tick made yet");
  else body.append(...rows);
  ticksCursor = answer.cursor;
  byId("recurring-ticks-more").hidden = answer.cursor === null;
}
