// The two modal dialogs: the confirmation every change goes through, and the bearer
// token (asked for when the server answers 401).

import { setToken, token } from "./api.js";
import { byId, h, say } from "./dom.js";

/**
 * Ask before a change. `title`, `text` and `action` (the confirm button's label) say
 * what will happen; `ids` (optional) are listed, the first 20 of them; `danger` marks
 * a change that loses something (purge, cancel) rather than one that redoes. Resolves true
 * only when the operator confirms; Escape or "Back" resolve false.
 */
export function confirmChange({ title, text, action, ids = [], danger = true }) {
  const dialog = byId("confirm-dialog");
  byId("confirm-title").textContent = title;
  byId("confirm-text").textContent = text;
  const shown = ids.slice(0, 20).map((id) => h("li", {}, id));
  if (ids.length > shown.length) shown.push(h("li", { class: "more" }, `and ${ids.length - shown.length} more`));
  const list = byId("confirm-ids");
  list.replaceChildren(...shown);
  list.hidden = !shown.length;
  const ok = byId("confirm-ok");
  ok.textContent = action;
  ok.className = danger ? "danger" : "primary";
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
    dialog.showModal();
    byId("confirm-cancel").focus(); // the safe choice has the focus
  });
}

// ----- the token ---------------------------------------------------------------------

let asking = null; // the pending question, so concurrent 401s share one dialog
const listeners = [];

/** Call fn() whenever the token changes (set or forgotten). */
export function onTokenChange(fn) {
  listeners.push(fn);
}

function tokenChanged() {
  showTokenState();
  for (const fn of listeners) fn();
}

export function showTokenState() {
  const button = byId("token-button");
  const present = Boolean(token());
  button.textContent = present ? "Token: set" : "Token: none";
  button.classList.toggle("has-token", present);
  button.setAttribute("aria-label", present ? "bearer token set; change or forget it" : "set a bearer token");
}

/**
 * Show the token dialog; `reason` (the 401's detail) says why it is asked for.
 * Resolves true when a token was given, false otherwise.
 */
export function askToken(reason = "") {
  if (asking) return asking;
  const dialog = byId("token-dialog");
  const input = byId("token-input");
  say(byId("token-reason"), reason, "error");
  input.value = "";
  dialog.returnValue = "";
  asking = new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        asking = null;
        const answer = dialog.returnValue;
        if (answer === "save" && input.value.trim()) {
          setToken(input.value.trim());
          input.value = "";
          tokenChanged();
          resolve(true);
          return;
        }
        input.value = "";
        if (answer === "forget") {
          setToken("");
          tokenChanged();
        }
        resolve(false);
      },
      { once: true },
    );
    dialog.showModal();
    input.focus();
  });
  return asking;
}

export function setUpTokenDialog() {
  const dialog = byId("token-dialog");
  byId("token-cancel").addEventListener("click", () => dialog.close("cancel"));
  byId("token-forget").addEventListener("click", () => dialog.close("forget"));
  byId("token-button").addEventListener("click", () => askToken(""));
  showTokenState();
}

// ----- failures ------------------------------------------------------------------------

/**
 * Say why a call failed in `element`. On a 401 it asks for a token and resolves true
 * when one was given (the caller then tries again); otherwise it resolves false.
 */
export async function explainFailure(error, element, what) {
  const status = error && typeof error.status === "number" ? error.status : -1;
  const detail = error && error.detail ? error.detail : String(error);
  if (status === 401) {
    say(element, `${what}: this server needs a bearer token (${detail}).`, "warn");
    const given = await askToken(detail);
    if (given) say(element, "");
    return given;
  }
  if (status === 403) {
    say(element, `${what}: not allowed (403): ${detail}. The token's role lacks this permission.`, "error");
  } else if (status === 0) {
    say(element, `${what}: ${detail}.`, "error");
  } else if (status > 0) {
    say(element, `${what}: ${detail} (${status}).`, "error");
  } else {
    say(element, `${what}: ${detail}`, "error");
    console.error(error);
  }
  return false;
}
