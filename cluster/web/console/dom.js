// Building elements and formatting numbers and times.
//
// Everything that comes from the server (ids, topics, payloads, errors, host names) is
// data: it becomes text nodes or attribute values, never markup. Nothing here assigns
// innerHTML, and no element gets a style attribute (the page's CSP forbids them).

const SVG_NS = "http://www.w3.org/2000/svg";

// Properties set as such rather than as attributes.
const PROPERTIES = new Set(["hidden", "disabled", "checked", "value", "className"]);

function apply(element, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") {
      for (const [event, handler] of Object.entries(value)) element.addEventListener(event, handler);
    } else if (key === "class") {
      element.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (key === "text") {
      element.textContent = String(value);
    } else if (key === "style") {
      throw new Error("no style attributes: the console's CSP refuses them");
    } else if (PROPERTIES.has(key) && !(element instanceof SVGElement)) {
      element[key] = value;
    } else {
      element.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element: h("td", {class: "num"}, "12") */
export function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  apply(element, attrs);
  append(element, children);
  return element;
}

/** An SVG element. */
export function svg(tag, attrs, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  apply(element, attrs);
  append(element, children);
  return element;
}

export function byId(id) {
  const element = document.getElementById(id);
  if (!element) throw new Error(`no element #${id}`);
  return element;
}

/** A term and its value in a <dl>: [<dt>, <dd attrs>]. */
export function field(name, value, attrs = {}) {
  return [h("dt", {}, name), h("dd", attrs, value)];
}

/** Mark the row of a table whose data-<key> is `value` as the one shown beside it. */
export function markCurrent(table, key, value) {
  for (const row of table.tBodies[0].rows) {
    row.classList.toggle("current", value !== null && row.dataset[key] === value);
  }
}

/** Replace a table body's rows; an empty list shows `empty` across all columns. */
export function fillRows(tbody, rows, empty) {
  if (rows.length) {
    tbody.replaceChildren(...rows);
    return;
  }
  const columns = tbody.closest("table").querySelectorAll("thead th").length || 1;
  tbody.replaceChildren(h("tr", { class: "empty" }, h("td", { colspan: columns }, empty)));
}

/** Show a message (kind: "error", "warn", "ok" or "info"), or hide it with no text. */
export function say(element, text, kind = "info") {
  element.textContent = text || "";
  element.hidden = !text;
  element.className = `msg ${kind}`;
}

// ----- numbers and times -------------------------------------------------------------

const INTEGER = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const ONE_DECIMAL = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1 });
const TWO_DECIMALS = new Intl.NumberFormat("en-US", { maximumFractionDigits: 2 });

export function count(value) {
  return value === null || value === undefined ? "–" : INTEGER.format(value);
}

/** Jobs per second. */
export function rate(value) {
  if (value === null || value === undefined) return "–";
  return (value > 0 && value < 10 ? ONE_DECIMAL : INTEGER).format(value);
}

/** Milliseconds: "0.42 ms", "12.5 ms", "830 ms", "12.3 s". */
export function millis(value) {
  if (value === null || value === undefined) return "–";
  if (value < 1) return `${TWO_DECIMALS.format(value)} ms`;
  if (value < 100) return `${ONE_DECIMAL.format(value)} ms`;
  if (value < 10_000) return `${INTEGER.format(value)} ms`;
  return seconds(value / 1000);
}

export function seconds(value) {
  if (value < 59.95) return `${ONE_DECIMAL.format(value)} s`;
  const whole = Math.round(value);
  if (whole < 3600) return `${Math.floor(whole / 60)} min ${whole % 60} s`;
  const minutes = Math.round(value / 60);
  if (minutes < 1440) return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  return `${ONE_DECIMAL.format(value / 86400)} days`;
}

/** Epoch milliseconds as "2026-11-24 14:47:01.123" (UTC). */
export function utc(ms) {
  if (ms === null || ms === undefined) return "–";
  return new Date(ms).toISOString().replace("T", " ").replace("Z", "");
}

/** Epoch milliseconds as "2026-11-24 14:47:01" (UTC), for narrow columns. */
export function utcSeconds(ms) {
  return utc(ms).slice(0, 19);
}

/** Epoch milliseconds as HH:MM:SS (UTC), for chart axes. */
export function clock(ms) {
  return new Date(ms).toISOString().slice(11, 19);
}

/** "in 59 s", "3 min 2 s ago" relative to now. */
export function relative(ms, now = Date.now()) {
  const delta = (ms - now) / 1000;
  if (Math.abs(delta) < 0.5) return "now";
  return delta > 0 ? `in ${seconds(delta)}` : `${seconds(-delta)} ago`;
}

/** Pretty JSON for display as text. */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}
