// Calls to the JSON API v1 of the same origin, with the bearer token of this tab.
//
// A failed call throws ApiError: its `status` is the HTTP status (0 when the server did
// not answer) and its `detail` the problem document's detail (RFC 9457), or a sentence
// saying what came back instead.

const TOKEN_KEY = "delayq.token";

export class ApiError extends Error {
  constructor(status, problem, detail) {
    super(detail);
    this.status = status;
    this.problem = problem; // the problem document, or null
    this.detail = detail;
  }

  get kind() {
    const type = this.problem && typeof this.problem.type === "string" ? this.problem.type : "";
    return type.startsWith("urn:delayq:problem:") ? type.slice("urn:delayq:problem:".length) : "";
  }
}

export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return ""; // storage disabled: no token
  }
}

export function setToken(value) {
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // storage disabled: the token cannot be kept
  }
}

/** The path of a job: its id is one path segment, so "/" travels as %2F. */
export function jobPath(jobId, suffix = "") {
  return `/v1/jobs/${encodeURIComponent(jobId)}${suffix}`;
}

export function deadPath(jobId) {
  return `/v1/dead-letters/${encodeURIComponent(jobId)}`;
}

export function recurringPath(name) {
  return `/v1/recurring/${encodeURIComponent(name)}`;
}

/** method path [body] → the decoded JSON answer; throws ApiError. */
export async function call(method, path, body) {
  const headers = { Accept: "application/json, application/problem+json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  const init = { method, headers, cache: "no-store", credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, null, `the server did not answer (${error.message})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const detail =
      data && typeof data.detail === "string"
        ? data.detail
        : `HTTP ${response.status} ${response.statusText}`.trim();
    throw new ApiError(response.status, data, detail);
  }
  if (data === null) throw new ApiError(response.status, null, "the answer is not JSON");
  return data;
}
