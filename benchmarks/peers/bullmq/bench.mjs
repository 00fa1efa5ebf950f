// BullMQ side of benchmarks/harness.py (the version pinned in package.json).
//
//   node bench.mjs fire    --redis URL --jobs N --rate R --lead S --give-up S --raw FILE
//   node bench.mjs backlog --redis URL --jobs N --start-in S --spread S
//   (both take --payload-bytes B, default 100, and --caller-ids: every job gets
//   opts.jobId = order-<run>-<n>-close, unique per run, instead of BullMQ's generated id)
//
// fire: N delayed jobs (addBulk, 1,000 per call, removeOnComplete) due evenly at R/s from
// S seconds after the start; one Worker with concurrency 200 notes each job's receive and
// due time and writes them as float64 pairs to FILE (read by benchmarks/summary.py). Gives
// up --give-up seconds after the last due time.
// backlog: N delayed jobs due from --start-in seconds ahead, spread over --spread seconds,
// no worker; Redis INFO used_memory before and after the adds and the MEMORY USAGE of
// the queue's keys, then the queue is obliterated and used_memory read again.
// Each mode prints one JSON line.
import { writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { Queue, Worker } from "bullmq";

const BATCH = 1000;
const CONCURRENCY = 200;

const { positionals: [mode], values: opt } = parseArgs({
  allowPositionals: true,
  options: {
    ...Object.fromEntries(
      ["redis", "jobs", "rate", "lead", "give-up", "raw", "start-in", "spread", "payload-bytes"]
        .map((name) => [name, { type: "string" }]),
    ),
    "caller-ids": { type: "boolean", default: false },
  },
});
const url = new URL(opt.redis ?? "redis://127.0.0.1:6379/0");
const connection = {
  host: url.hostname, port: Number(url.port || 6379), db: Number(url.pathname.slice(1) || 0),
};
const total = Number(opt.jobs);
const payload = "x".repeat(Number(opt["payload-bytes"] ?? 100));
const queueName = `bench-${process.pid}-${Date.now()}`;
const callerIds = opt["caller-ids"];
// Makes the caller ids unique per run, like delayq's (its run is a fresh key prefix).
const run = `${process.pid}${Date.now().toString(36)}`;

// addBulk in batches; each job's delay is its due time minus the time of its batch.
async function addAll(queue, dueOf, jobOpts) {
  const started = performance.now();
  for (let start = 0; start < total; start += BATCH) {
    const now = Date.now();
    const batch = [];
    for (let i = start; i < Math.min(start + BATCH, total); i++) {
      const due = dueOf(i);
      const ids = callerIds ? { jobId: `order-${run}-${i}-close` } : {};
      batch.push({ name: "j", data: { due, payload },
        opts: { delay: Math.max(due - now, 0), ...ids, ...jobOpts } });
    }
    await queue.addBulk(batch);
  }
  return total / ((performance.now() - started) / 1000);
}

// [used_memory, keys in the database], once any lazy free has finished.
async function redisFacts(client) {
  for (let i = 0; i < 100; i++) {
    const info = await client.info("memory");
    if (/^lazyfree_pending_objects:0\b/m.test(info) || i === 99) {
      return [Number(/^used_memory:(\d+)/m.exec(info)[1]), await client.dbsize()];
    }
    await sleep(100);
  }
}

// [bytes, keys]: MEMORY USAGE (every element counted) summed over the keys matching
// pattern; unlike used_memory, other clients of the same Redis do not change it.
async function keyUsage(client, pattern) {
  const keys = [];
  let cursor = "0";
  do {
    const [next, found] = await client.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    keys.push(...found);
    cursor = next;
  } while (cursor !== "0");
  let bytes = 0;
  for (let start = 0; start < keys.length; start += BATCH) {
    const sizes = await client.pipeline(keys.slice(start, start + BATCH)
      .map((key) => ["memory", "usage", key, "samples", "0"])).exec();
    for (const [, size] of sizes) bytes += size ?? 0;
  }
  return [bytes, keys.length];
}

async function fire() {
  const queue = new Queue(queueName, { connection });
  const pairs = new Float64Array(2 * total);
  const seen = new Set();
  let received = 0;
  let duplicates = 0;
  let done;
  const finished = new Promise((resolve) => { done = resolve; });
  const worker = new Worker(queueName, async (job) => {
    const now = performance.timeOrigin + performance.now();
    if (seen.has(job.id)) { duplicates++; return; }
    seen.add(job.id);
    pairs[2 * received] = now;
    pairs[2 * received + 1] = job.data.due;
    received++;
    if (received === total) done();
  }, { connection, concurrency: CONCURRENCY });

  const firstDue = Math.round(Date.now() + Number(opt.lead) * 1000);
  const dueOf = (i) => firstDue + Math.floor((i * 1000) / Number(opt.rate));
  const addRate = await addAll(queue, dueOf, { removeOnComplete: true });
  const addedInTime = Date.now() < firstDue;
  const giveUp = setTimeout(done, dueOf(total - 1) + Number(opt["give-up"]) * 1000 - Date.now());
  await finished;
  clearTimeout(giveUp);
  await worker.close(received < total);
  await queue.obliterate({ force: true });
  await queue.close();
  writeFileSync(opt.raw, new Uint8Array(pairs.buffer, 0, received * 16));
  return { mode, jobs: total, caller_ids: callerIds, received, duplicates, add_rate_per_s: Math.round(addRate),
    first_due_ms: firstDue, scheduling_finished_before_first_due: addedInTime };
}

async function backlog() {
  const queue = new Queue(queueName, { connection });
  await queue.waitUntilReady();
  const client = await queue.client;
  const before = await redisFacts(client);
  const start = Math.round(Date.now() + Number(opt["start-in"]) * 1000);
  const spreadMs = Number(opt.spread) * 1000;
  const addRate = await addAll(queue, (i) => start + Math.floor((i * spreadMs) / total), {});
  const after = await redisFacts(client);
  const [ownBytes, ownKeys] = await keyUsage(client, `${queue.opts.prefix}:${queueName}:*`);
  await queue.obliterate({ force: true });
  const cleaned = await redisFacts(client);
  await queue.close();
  return { mode, jobs: total, caller_ids: callerIds, add_rate_per_s: Math.round(addRate),
    redis: { used_memory_before: before[0], used_memory_after: after[0],
      used_memory_after_cleanup: cleaned[0], keys_added: after[1] - before[1],
      own_keys: ownKeys, own_keys_memory_usage: ownBytes },
    redis_bytes_per_job: Math.round(((after[0] - before[0]) / total) * 10) / 10,
    own_keys_bytes_per_job: Math.round((ownBytes / total) * 10) / 10 };
}

const modes = { fire, backlog };
if (!modes[mode]) {
  console.error("usage: node bench.mjs fire|backlog --redis URL --jobs N ...");
  process.exit(2);
}
console.log(JSON.stringify({ system: "bullmq", ...(await modes[mode]()) }));
process.exit(0);
