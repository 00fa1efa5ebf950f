// The console's entry point: the views behind the address's fragment (#cluster,
// #jobs, #jobs/<percent-encoded id>, #recurring, #recurring/<percent-encoded name>,
// #dead-letters, #expired), the token, and what to refresh
// when the token changes.

import * as cluster from "./cluster.js";
import * as counts from "./counts.js";
import * as dead from "./dead.js";
import { onTokenChange, setUpTokenDialog } from "./dialogs.js";
import { byId } from "./dom.js";
import * as expired from "./expired.js";
import * as jobs from "./jobs.js";
import * as recurring from "./recurring.js";
import * as search from "./search.js";

const VIEWS = {
  cluster: { section: "view-cluster", nav: "nav-cluster", module: cluster },
  jobs: { section: "view-jobs", nav: "nav-jobs", module: jobs },
  recurring: { section: "view-recurring", nav: "nav-recurring", module: recurring },
  "dead-letters": { section: "view-dead", nav: "nav-dead", module: dead },
  expired: { section: "view-expired", nav: "nav-expired", module: expired },
};

let current = null;

function parseHash() {
  const hash = location.hash.replace(/^#/, "");
  const slash = hash.indexOf("/");
  const name = slash < 0 ? hash : hash.slice(0, slash);
  let param = slash < 0 ? "" : hash.slice(slash + 1);
  try {
    param = decodeURIComponent(param);
  } catch {
    // not percent-encoded as the console writes it: take it as it is
  }
  return { name: name in VIEWS ? name : "cluster", param };
}

function route() {
  const { name, param } = parseHash();
  for (const [key, view] of Object.entries(VIEWS)) {
    const active = key === name;
    byId(view.section).hidden = !active;
    const link = byId(view.nav);
    if (active) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (name !== "cluster") {
    cluster.stop();
    counts.stop();
  }
  byId("updated").hidden = name !== "cluster"; // the cluster's figures' time
  const changed = current !== name;
  current = name;
  if (name === "cluster") {
    cluster.start();
    counts.start();
  }
  else if (name === "jobs") jobs.show(param);
  else if (name === "recurring") recurring.show(param);
  else if (name === "dead-letters" && changed) dead.show();
  else if (name === "expired" && changed) expired.show();
  const titles = { "dead-letters": "dead letters", recurring: "schedules" };
  document.title = `delayq · ${titles[name] ?? name}`;
}

function main() {
  setUpTokenDialog();
  jobs.setUp();
  dead.setUp();
  recurring.setUp();
  search.setUp();
  expired.setUp();
  onTokenChange(() => {
    VIEWS[current]?.module.refresh();
    if (current === "jobs") search.refresh();
  });
  window.addEventListener("hashchange", route);
  route();
  document.body.dataset.ready = "true"; // for tests: the modules loaded and ran
}

main();
