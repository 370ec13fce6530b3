// End-to-end test of connecting to a thread (GET /<agent>/threads/<id>/connect) through
// @ag-ui/client 1.0.0's own `connectAgent()`, with the `withThreadConnect` helper of
// clients/agui-host: a reloaded page joins a run that is still streaming and ends with the
// conversation and the rest of the run, each message exactly once, as the page that sent it.

import { test } from "node:test";
import assert from "node:assert/strict";

import { withThreadConnect } from "../../clients/agui-host/index.mjs";
import { textTurn, turn } from "./fake-openai.mjs";
import { CLIENTS, captureConsole, newAgent, run, types, userMessage, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;
const env = withFakeUpstreamAndServer();
const client = CLIENTS.find((c) => c.protocol10);

function shape(messages) {
  return messages.map((m) => ({ id: m.id, role: m.role, content: m.content ?? null }));
}

/** Runs `connectAgent()` through the client's pipeline; fails on any client complaint. */
async function connect(agent) {
  const events = [];
  const outcome = await captureConsole(() =>
    agent.connectAgent({}, { onEvent: ({ event }) => events.push(structuredClone(event)) }),
  );
  const complaints = [...outcome.warnings, ...outcome.errors];
  if (outcome.error || complaints.length > 0) {
    throw new Error(
      `connectAgent() failed: ${outcome.error?.message ?? ""}\n${complaints.join("\n")}\nevents: ${types(events).join(", ")}`,
    );
  }
  return events;
}

test(`[${client.version}] connect: a reloaded page joins the live run and holds every message once`, { timeout: TIMEOUT }, async () => {
  const key = "connect-live";
  env.fake.script(
    key,
    textTurn("Hello."),
    { ...turn({ text: ["one ", "two ", "three ", "four ", "five"] }), delayMs: 150 },
  );
  const page = newAgent(client, `${env.server.url}/e2e`, { prompt: `${key}: hi` });
  await run(page);
  page.addMessage(userMessage("Count to five"));
  let streaming;
  const started = new Promise((resolve) => (streaming = resolve));
  const live = page.runAgent({}, {
    onEvent: ({ event }) => {
      if (event.type === "TEXT_MESSAGE_CONTENT") streaming();
    },
  });
  await started;

  const Connecting = withThreadConnect(client.HttpAgent);
  const reloaded = new Connecting({ url: `${env.server.url}/e2e`, threadId: page.threadId });
  const events = await connect(reloaded);
  await live;
  assert.deepEqual(types(events).slice(0, 2), ["RUN_STARTED", "MESSAGES_SNAPSHOT"]);
  assert.equal(types(events).at(-1), "RUN_FINISHED");
  assert.deepEqual(shape(reloaded.messages), shape(page.messages), JSON.stringify(reloaded.messages, null, 1));
  assert.equal(reloaded.messages.at(-1).content, "one two three four five");
  const ids = reloaded.messages.map((m) => m.id);
  assert.equal(new Set(ids).size, ids.length, "no message twice");
  assert.equal(env.fake.requests(key).length, 2, "a connect calls no model");

  // Once the run is over, a connect is the stored thread; the page goes on from it.
  const later = new Connecting({ url: `${env.server.url}/e2e`, threadId: page.threadId });
  const stored = await connect(later);
  assert.deepEqual(types(stored), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]);
  assert.deepEqual(shape(later.messages), shape(page.messages));
  env.fake.script(key, textTurn("Six."));
  later.addMessage(userMessage("And then?"));
  await run(later);
  assert.equal(later.messages.at(-1).content, "Six.");
});

test(`[${client.version}] connect: an unknown thread is an error the client reports`, { timeout: TIMEOUT }, async () => {
  const Connecting = withThreadConnect(client.HttpAgent);
  const agent = new Connecting({ url: `${env.server.url}/e2e`, threadId: "connect-nobody-knows" });
  const outcome = await captureConsole(() => agent.connectAgent());
  assert.ok(outcome.error, "connectAgent() rejects");
  assert.match(String(outcome.error?.message ?? outcome.error), /404.*thread_not_found/);
});
