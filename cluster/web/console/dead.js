// Dead letters: GET /v1/dead-letters?topic=&limit= (the list and how many in all),
// GET /v1/dead-letters/{id} (one, with its history), and replay or purge
// (POST /v1/dead-letters/replay|purge with {"job_ids": [...]}, {"topic": ...} or
// {"all": true}), each after a confirmation naming what will happen.

import { call, deadPath } from "./api.js";
import { confirmChange, explainFailure } from "./dialogs.js";
import { byId, count, field, fillRows, h, markCurrent, pretty, say, utc, utcSeconds } from "./dom.js";

let listed = []; // the dead jobs on screen
let total = 0; // how many there are in all (of the topic loaded)
let loadedTopic = ""; // the topic the list was loaded with ("" for all)
let openId = null; // the dead job shown beside the list
let asked = 0; // the latest list asked for: an older answer arriving later is dropped
const selected = new Set();

const ACTIONS = {
  replay: {
    verb: "Replay",
    done: "Replayed",
    danger: false,
    one: "It gets a new set of attempts and is due now: the node owning its slot publishes it at once.",
    many: "They get a new set of attempts and are due now: the nodes owning their slots publish them at once.",
  },
  purge: {
    verb: "Purge",
    done: "Purged",
    danger: true,
    one: "Redis forgets it. MySQL keeps its row as dead, so it can still be replayed by its id.",
    many: "Redis forgets them. MySQL keeps their rows as dead, so each can still be replayed by its id.",
  },
};

export function setUp() {
  byId("dead-form").addEventListener("submit", (event) => {
    event.preventDefault();
    load();
  });
  byId("dead-select-all").addEventListener("change", (event) => {
    selected.clear();
    if (event.target.checked) for (const job of listed) selected.add(job.job_id);
    for (const box of byId("dead-list").querySelectorAll("tbody input[type=checkbox]")) {
      box.checked = event.target.checked;
    }
    showSelection();
  });
  byId("dead-replay-selected").addEventListener("click", () => act("replay", { job_ids: [...selected] }));
  byId("dead-purge-selected").addEventListener("click", () => act("purge", { job_ids: [...selected] }));
  byId("dead-replay-all").addEventListener("click", () => act("replay", everything()));
  byId("dead-purge-all").addEventListener("click", () => act("purge", everything()));
  byId("dead-detail-close").addEventListener("click", closeOne);
}

export function show() {
  load();
}

export function refresh() {
  load();
}

function everything() {
  return loadedTopic ? { topic: loadedTopic } : { all: true };
}

export async function load() {
  const message = byId("dead-message");
  const topic = byId("dead-topic").value.trim();
  const query = new URLSearchParams({ limit: byId("dead-limit").value });
  if (topic) query.set("topic", topic);
  const mine = ++asked;
  let answer;
  try {
    answer = await call("GET", `/v1/dead-letters?${query}`);
  } catch (error) {
    if (mine !== asked) return;
    if (await explainFailure(error, message, "Listing the dead letters")) load();
    return;
  }
  if (mine !== asked) return;
  if (message.classList.contains("error") || message.classList.contains("warn")) say(message, "");
  listed = answer.dead_letters;
  total = answer.count;
  loadedTopic = topic;
  for (const id of [...selected]) if (!listed.some((job) => job.job_id === id)) selected.delete(id);
  render();
}

function render() {
  const where = loadedTopic ? ` in topic ${loadedTopic}` : "";
  byId("dead-count").textContent =
    `${count(total)} dead${where}` + (listed.length < total ? `, showing ${count(listed.length)}` : "");
  const rows = listed.map((job) => {
    const box = h("input", {
      type: "checkbox",
      checked: selected.has(job.job_id),
      "aria-label": `select ${job.job_id}`,
      on: {
        change: (event) => {
          if (event.target.checked) selected.add(job.job_id);
          else selected.delete(job.job_id);
          showSelection();
        },
      },
    });
    return h(
      "tr",
      { "data-testid": "dead-row", "data-job-id": job.job_id, class: job.job_id === openId ? "current" : "" },
      h("td", { class: "check" }, box),
      h(
        "td",
        { class: "mono" },
        h("button", { type: "button", class: "link mono", "data-testid": "dead-show", on: { click: () => showOne(job.job_id) } }, job.job_id),
      ),
      h("td", { class: "mono" }, job.topic),
      h("td", { class: "mono nowrap", title: `${utc(job.died_ms)} UTC` }, utcSeconds(job.died_ms)),
      h("td", { class: "num" }, job.attempts === null ? "–" : count(job.attempts)),
      h("td", { class: "error-text clip col-error", title: job.last_error || "" }, job.last_error ?? "–"),
      h(
        "td",
        { class: "actions" },
        h("button", { type: "button", "data-testid": "dead-replay", on: { click: () => act("replay", { job_ids: [job.job_id] }) } }, "Replay…"),
        h("button", { type: "button", class: "danger", "data-testid": "dead-purge", on: { click: () => act("purge", { job_ids: [job.job_id] }) } }, "Purge…"),
      ),
    );
  });
  fillRows(byId("dead-list").tBodies[0], rows, loadedTopic ? `no dead job in topic ${loadedTopic}` : "no dead job");
  showSelection();
}

function showSelection() {
  const n = selected.size;
  const replay = byId("dead-replay-selected");
  const purge = byId("dead-purge-selected");
  replay.disabled = purge.disabled = n === 0;
  replay.textContent = n ? `Replay ${count(n)} selected…` : "Replay selected…";
  purge.textContent = n ? `Purge ${count(n)} selected…` : "Purge selected…";
  const all = byId("dead-select-all");
  all.checked = n > 0 && n === listed.length;
  all.indeterminate = n > 0 && n < listed.length;
  const scope = loadedTopic ? `all of ${loadedTopic}` : "all";
  byId("dead-replay-all").textContent = `Replay ${scope}…`;
  byId("dead-purge-all").textContent = `Purge ${scope}…`;
  byId("dead-replay-all").disabled = byId("dead-purge-all").disabled = total === 0;
}

function plural(n) {
  return `${count(n)} dead job${n === 1 ? "" : "s"}`;
}

/** What a selection names, in words; whether it may be one job; the ids to list. */
function describe(selection) {
  if (selection.job_ids) {
    const n = selection.job_ids.length;
    return { what: plural(n), single: n === 1, ids: selection.job_ids };
  }
  const listed = total === 1 ? "1 when listed" : `${count(total)} when listed`;
  if (selection.topic) {
    return { what: `every dead job of topic ${selection.topic} (${listed})`, single: false, ids: [] };
  }
  return { what: `every dead job of every topic (${listed})`, single: false, ids: [] };
}

async function act(kind, selection) {
  const action = ACTIONS[kind];
  const { what, single, ids } = describe(selection);
  const yes = await confirmChange({
    title: `${action.verb} ${what}?`,
    text: single ? action.one : action.many,
    action: selection.job_ids ? `${action.verb} ${what}` : `${action.verb} all`,
    ids,
    danger: action.danger,
  });
  if (!yes) return;
  const message = byId("dead-message");
  let answer;
  try {
    answer = await call("POST", `/v1/dead-letters/${kind}`, selection);
  } catch (error) {
    if (await explainFailure(error, message, `${action.verb} failed`)) act(kind, selection);
    return;
  }
  const n = kind === "replay" ? answer.replayed : answer.purged;
  for (const id of ids) selected.delete(id);
  if (!selection.job_ids) selected.clear();
  await load();
  say(message, `${action.done} ${plural(n)}.`, "ok");
  if (openId !== null && (!selection.job_ids || ids.includes(openId))) closeOne();
}

async function showOne(jobId) {
  const message = byId("dead-message");
  let job;
  try {
    job = await call("GET", deadPath(jobId));
  } catch (error) {
    if (await explainFailure(error, message, "Reading the dead job")) showOne(jobId);
    return;
  }
  byId("dead-title").textContent = job.job_id;
  byId("dead-fields").replaceChildren(
    ...field("topic", job.topic, { class: "mono" }),
    ...field("slot", String(job.slot)),
    ...field("died", `${utc(job.died_ms)} UTC`),
    ...field("attempts", job.attempts === null ? "–" : count(job.attempts)),
    ...field("last error", job.last_error ?? "–", { class: job.last_error ? "mono error-text" : "" }),
  );
  byId("dead-record").textContent = pretty(job.record);
  const history = job.history.map((row) =>
    h(
      "li",
      {},
      h(
        "div",
        { class: "when" },
        h("span", { class: "mono" }, utc(Date.parse(row.at))),
        h("span", { class: `badge status-${row.status}` }, row.status),
        row.attempt === null ? "" : h("span", {}, `attempt ${row.attempt}`),
        row.node ? h("span", { class: "mono" }, row.node) : "",
      ),
      row.note ? h("div", { class: "note" }, row.note) : "",
    ),
  );
  byId("dead-history").replaceChildren(
    ...(history.length ? history : [h("li", { class: "empty" }, "no change recorded in MySQL yet")]),
  );
  byId("dead-detail").hidden = false;
  openId = job.job_id;
  markOpen();
}

function closeOne() {
  byId("dead-detail").hidden = true;
  openId = null;
  markOpen();
}

function markOpen() {
  markCurrent(byId("dead-list"), "jobId", openId);
}
