// What can be done to one job from a list: a new due time (POST /v1/jobs/{id}/reschedule
// with {"delay": seconds} or {"at": ISO 8601 UTC}), fire now (a reschedule with delay 0)
// and cancel (DELETE /v1/jobs/{id}), each after a dialog. Each resolves to a sentence
// saying what was done, or null when the operator backed out or the call failed (the
// failure is then said in `message`).

import { call, jobPath } from "./api.js";
import { confirmChange, explainFailure } from "./dialogs.js";
import { byId, relative, say, utc } from "./dom.js";

/** The new due time the operator gives: {"delay": s} or {"at": "…Z"}, or null (Back). */
function askDueTime(job) {
  const dialog = byId("reschedule-dialog");
  const delay = byId("reschedule-delay");
  const at = byId("reschedule-at");
  const error = byId("reschedule-error");
  byId("reschedule-title").textContent = `Reschedule ${job.job_id}?`;
  byId("reschedule-text").textContent =
    `Due ${utc(job.due_ms)} UTC (${relative(job.due_ms)}). Give a delay from now, or a time in UTC.`;
  delay.value = "";
  at.value = "";
  say(error, "", "error");
  dialog.returnValue = "";
  return new Promise((resolve) => {
    const form = byId("reschedule-form");
    const check = (event) => {
      if (event.submitter && event.submitter.value !== "confirm") return;
      const seconds = delay.value.trim();
      const when = at.value;
      if (Boolean(seconds) === Boolean(when)) {
        event.preventDefault();
        say(error, "Give either a delay or a time, not both.", "error");
      } else if (seconds && !(Number(seconds) >= 0)) {
        event.preventDefault();
        say(error, "The delay is a number of seconds, 0 or more.", "error");
      }
    };
    const back = () => dialog.close("cancel");
    form.addEventListener("submit", check);
    byId("reschedule-cancel").addEventListener("click", back);
    dialog.addEventListener(
      "close",
      () => {
        form.removeEventListener("submit", check);
        byId("reschedule-cancel").removeEventListener("click", back);
        if (dialog.returnValue !== "confirm") resolve(null);
        // datetime-local has no zone: the form says UTC, so it is sent as UTC.
        else if (delay.value.trim()) resolve({ delay: Number(delay.value) });
        else resolve({ at: `${at.value.length === 16 ? `${at.value}:00` : at.value}Z` });
      },
      { once: true },
    );
    dialog.showModal();
    delay.focus();
  });
}

async function reschedule(job, body, message, what) {
  try {
    return await call("POST", jobPath(job.job_id, "/reschedule"), body);
  } catch (error) {
    if (await explainFailure(error, message, what)) return reschedule(job, body, message, what);
    return null;
  }
}

export async function rescheduleJob(job, message) {
  const body = await askDueTime(job);
  if (!body) return null;
  const answer = await reschedule(job, body, message, "Rescheduling the job");
  return answer ? `Rescheduled ${job.job_id}: due ${utc(answer.due_ms)} UTC (${relative(answer.due_ms)}).` : null;
}

export async function fireNow(job, message) {
  const yes = await confirmChange({
    title: "Fire this job now?",
    text:
      `The job of topic ${job.topic}, due ${utc(job.due_ms)} UTC (${relative(job.due_ms)}), ` +
      "becomes due now: the node owning its slot publishes it at once.",
    action: "Fire now",
    ids: [job.job_id],
    danger: false,
  });
  if (!yes) return null;
  const answer = await reschedule(job, { delay: 0 }, message, "Firing the job now");
  return answer ? `Due now: ${job.job_id} is published at once.` : null;
}

export async function cancelJob(job, message) {
  const yes = await confirmChange({
    title: "Cancel this job?",
    text:
      `The job of topic ${job.topic}, due ${utc(job.due_ms)} UTC (${relative(job.due_ms)}), ` +
      "will never fire. MySQL keeps its row as cancelled.",
    action: "Cancel the job",
    ids: [job.job_id],
    danger: true,
  });
  if (!yes) return null;
  try {
    await call("DELETE", jobPath(job.job_id));
  } catch (error) {
    if (await explainFailure(error, message, "Cancelling the job")) return cancelJob(job, message);
    return null;
  }
  return `Cancelled ${job.job_id}: it will never fire.`;
}
