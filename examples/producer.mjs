// A producer in JavaScript (Node 18+, no packages): schedules jobs through `delayq web`.
//
//   DELAYQ_API=http://127.0.0.1:8470 DELAYQ_TOKEN=... node examples/producer.mjs order-42
//
// It gives every job its own id, so sending it again after a lost answer, a 503 or an
// outcome-unknown is safe: the same job_id is one job. Prints each job's id and whether
// this call created it or it was already there.

const api = process.env.DELAYQ_API ?? "http://127.0.0.1:8470";
const token = process.env.DELAYQ_TOKEN;
const orderId = process.argv[2] ?? "order-42";

async function post(path, body, attempts = 5) {
  for (let attempt = 1; ; attempt++) {
    let answer;
    try {
      answer = await fetch(api + path, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          ...(token ? { Authorization: `Bearer ${token}` } : {}),
        },
        body: JSON.stringify(body),
      });
    } catch (error) {
      // No answer at all: the jobs may or may not be stored; same ids, so retry.
      if (attempt >= attempts) throw error;
      await sleep(1000 * attempt);
      continue;
    }
    const reply = await answer.json();
    if (answer.ok) return reply;
    const retryable =
      answer.status === 503 || reply.type === "urn:delayq:problem:outcome-unknown";
    if (!retryable || attempt >= attempts) {
      // 4xx: the request itself is wrong (reply.detail says how); nothing was stored.
      throw new Error(`${answer.status} ${reply.type}: ${reply.detail}`);
    }
    const wait = Number(answer.headers.get("Retry-After") ?? attempt);
    await sleep(1000 * wait);
  }
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Close the order in 30 minutes, remind the customer in 10 (a batch: both or neither).
const reply = await post("/v1/jobs", {
  jobs: [
    {
      topic: "orders.close",
      payload: { order: orderId },
      delay: 1800,
      job_id: `${orderId}-close`,
      biz_id: orderId,
    },
    {
      topic: "reminders",
      payload: { order: orderId, text: "Your order is waiting for payment" },
      delay: 600,
      job_id: `${orderId}-remind`,
      biz_id: orderId,
    },
  ],
});
for (const job of reply.jobs) {
  console.log(`${job.job_id} ${job.created ? "created" : "already there"}`);
}
