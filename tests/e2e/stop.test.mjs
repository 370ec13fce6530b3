// End-to-end test of stopping a run the way a standard AG-UI client does: `abortRun()` closes
// the connection. The server, with its default thread store, must cancel the run and close
// its upstream request at once (the fake model records when), and keep in the thread the
// answer as far as it had streamed. A client that asks for its run to go on after a disconnect
// (`X-AGUI-On-Disconnect: continue`) can reconnect and read the whole answer.

import { test } from "node:test";
import assert from "node:assert/strict";

import { textTurn } from "./fake-openai.mjs";
import { CLIENTS, captureConsole, id, userMessage, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;
const env = withFakeUpstreamAndServer();

/** The long answer: WORDS words, one chunk each, 30 ms apart (3 s in all). */
const WORDS = 100;
const words = Array.from({ length: WORDS }, (_, i) => `w${i} `);
const longAnswer = () => ({ ...textTurn(...words), delayMs: 30 });

/** How soon after abortRun() the upstream request must be closed. */
const CLOSE_WITHIN_MS = 100;
/** Attempts at that: a loaded machine only ever adds delay, so the best of a few is the figure. */
const ATTEMPTS = 3;

/**
 * Runs `agent` and aborts it once `deltas` text deltas have arrived. Resolves to
 * { abortedAt, text } (the text the client had seen).
 */
async function runAndAbort(agent, runId, deltas) {
  let seen = 0;
  let text = "";
  let abortedAt;
  await captureConsole(() =>
    agent
      .runAgent(
        { runId },
        {
          onEvent: ({ event }) => {
            if (event.type !== "TEXT_MESSAGE_CONTENT" || abortedAt !== undefined) return;
            text += event.delta;
            seen += 1;
            if (seen === deltas) {
              abortedAt = performance.now();
              agent.abortRun();
            }
          },
        },
      )
      .catch(() => {}),
  );
  assert.notEqual(abortedAt, undefined, "the run was aborted mid-stream");
  return { abortedAt, text };
}

async function waitFor(what, predicate, timeoutMs = 5_000) {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function storedThread(threadId, lastRunId) {
  const response = await fetch(`${env.server.url}/e2e/threads/${encodeURIComponent(threadId)}`);
  if (response.status !== 200) return undefined;
  const thread = await response.json();
  return thread.lastRunId === lastRunId ? thread : undefined;
}

const assistantText = (thread) =>
  thread.messages
    .filter((m) => m.role === "assistant")
    .map((m) => m.content ?? "")
    .join("");

for (const client of CLIENTS) {
  test(`[${client.version}] stop: abortRun() closes the upstream within ${CLOSE_WITHIN_MS} ms and the thread keeps what had streamed`, { timeout: TIMEOUT }, async () => {
    const closings = [];
    for (let attempt = 0; attempt < ATTEMPTS; attempt++) {
      const key = `stop-${client.tag}-${attempt}`;
      env.fake.script(key, longAnswer());
      const threadId = id(`thread-stop-${client.tag}`);
      const agent = new client.HttpAgent({ url: `${env.server.url}/e2e`, threadId });
      agent.addMessage(userMessage(`${key}: a long story`));
      const runId = id("run-stop");
      const { abortedAt, text } = await runAndAbort(agent, runId, 5);

      const [closedAt] = await waitFor("the upstream request to close", () => env.fake.aborts(key).length > 0 && env.fake.aborts(key));
      closings.push(closedAt - abortedAt);
      const thread = await waitFor("the stopped run's save", () => storedThread(threadId, runId));
      const kept = assistantText(thread);
      assert.ok(kept.startsWith(text), `${JSON.stringify(kept)} starts with ${JSON.stringify(text)}`);
      assert.ok(kept.split(" ").filter(Boolean).length < WORDS / 2, `the stopped answer was saved in full: ${kept}`);
      if (closings.at(-1) <= CLOSE_WITHIN_MS) break;
    }
    const best = Math.min(...closings);
    console.log(`# [${client.version}] upstream closed ${closings.map((ms) => `${ms.toFixed(1)} ms`).join(", ")} after abortRun()`);
    assert.ok(best <= CLOSE_WITHIN_MS, `the upstream closed ${best.toFixed(1)} ms after abortRun() at best`);
  });
}

const v1 = CLIENTS.find((c) => c.version === "1.0.0");

test(`[${v1.version}] stop: a client that asked to continue reconnects and reads the whole answer`, { timeout: TIMEOUT }, async () => {
  const key = `continue-${v1.tag}`;
  env.fake.script(key, longAnswer());
  const threadId = id("thread-continue");
  const agent = new v1.HttpAgent({
    url: `${env.server.url}/e2e`,
    threadId,
    headers: { "X-AGUI-On-Disconnect": "continue" },
  });
  agent.addMessage(userMessage(`${key}: a long story`));
  const runId = id("run-continue");
  await runAndAbort(agent, runId, 5);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(env.fake.aborts(key).length, 0, "the run went on after the disconnect");

  const replay = await fetch(`${env.server.url}/e2e/runs/${encodeURIComponent(runId)}/events`);
  assert.equal(replay.status, 200);
  const events = (await replay.text())
    .split("\n\n")
    .map((frame) => frame.split("\n").find((line) => line.startsWith("data: ")))
    .filter(Boolean)
    .map((line) => JSON.parse(line.slice(6)));
  const text = events
    .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
    .map((e) => e.delta)
    .join("");
  assert.equal(text, words.join(""));
  assert.equal(events.at(-1).type, "RUN_FINISHED");
  const thread = await waitFor("the finished run's save", () => storedThread(threadId, runId));
  assert.equal(assistantText(thread), words.join(""));
});
