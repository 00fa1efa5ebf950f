// BullMQ side of benchmarks/compare.py: N delayed jobs due at a steady rate, one Worker
// (concurrency 200); lateness = receive time at the worker - due time.
// usage: node steady.mjs HOST PORT JOBS RATE LEAD_S PAYLOAD_BYTES
import { Queue, Worker } from "bullmq";

const [host, port, jobs, rate, leadS, payloadBytes] = process.argv.slice(2);
const total = Number(jobs);
const connection = { host, port: Number(port) };
const name = `cmp-${process.pid}-${Date.now()}`;
const queue = new Queue(name, { connection });
const payload = "x".repeat(Number(payloadBytes));

const firstDue = Date.now() + Number(leadS) * 1000;
const lateness = [];
let done;
const finished = new Promise((resolve) => { done = resolve; });
const worker = new Worker(name, async (job) => {
  lateness.push(Date.now() - job.data.due);
  if (lateness.length === total) done();
}, { connection, concurrency: 200 });

const addStart = performance.now();
for (let start = 0; start < total; start += 1000) {
  const now = Date.now();
  const batch = [];
  for (let i = start; i < Math.min(start + 1000, total); i++) {
    const due = firstDue + Math.floor((i * 1000) / Number(rate));
    batch.push({ name: "j", data: { due, payload }, opts: { delay: Math.max(due - now, 0),
      removeOnComplete: true } });
  }
  await queue.addBulk(batch);
}
const addSeconds = (performance.now() - addStart) / 1000;
const addedBeforeFirstDue = Date.now() < firstDue;
await finished;
await worker.close();
await queue.obliterate({ force: true });
await queue.close();
lateness.sort((a, b) => a - b);
const q = (p) => lateness[Math.min(lateness.length - 1, Math.floor(p * lateness.length))];
console.log(JSON.stringify({
  system: "bullmq", jobs: total, add_rate_per_s: Math.round(total / addSeconds),
  scheduling_finished_before_first_due: addedBeforeFirstDue,
  lateness_ms: { p50: q(0.5), p99: q(0.99), p999: q(0.999), max: lateness[lateness.length - 1] },
}));
process.exit(0);
