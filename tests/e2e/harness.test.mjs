// The oracle itself: the harness must fail a run when a client complains. Each case serves a
// hand-written AG-UI stream (no agui-host involved) that one or both clients reject or warn
// about, and checks that run() throws with the client's message.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import { CLIENTS, newAgent, run } from "./harness.mjs";

let server;
let base;
const streams = new Map();

before(async () => {
  server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      const events = streams.get(new URL(req.url, "http://x").pathname);
      if (!events) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (const e of events) res.write(`data: ${JSON.stringify(e)}\n\n`);
      res.end();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((r) => server.close(r)));

const ts = 1_700_000_000_000;
const started = (extra = {}) => ({ type: "RUN_STARTED", threadId: "t", runId: "r", timestamp: ts, ...extra });
const finished = (extra = {}) => ({ type: "RUN_FINISHED", threadId: "t", runId: "r", timestamp: ts, ...extra });

streams.set("/ok", [started(), finished()]);
// A patch that cannot apply: both clients log "Failed to apply state patch" and keep the state.
streams.set("/bad-patch", [
  started(),
  { type: "STATE_DELTA", delta: [{ op: "replace", path: "/missing/deep", value: 1 }], timestamp: ts },
  finished(),
]);
// An unknown field: 1.0 strips it with an [ag-ui][enforce] warning (0.0.59 passes it through).
streams.set("/unknown-field", [started({ surprise: true }), finished()]);
// A null optional: fatal for both.
streams.set("/null-name", [
  started(),
  { type: "TEXT_MESSAGE_START", messageId: "m", role: "assistant", name: null, timestamp: ts },
  { type: "TEXT_MESSAGE_END", messageId: "m", timestamp: ts },
  finished(),
]);
// pendingToolCallIds: accepted by 1.0, fatal for 0.0.59 (strict outcome object).
streams.set("/pending-ids", [
  started(),
  { type: "TOOL_CALL_START", toolCallId: "c", toolCallName: "x", timestamp: ts },
  { type: "TOOL_CALL_END", toolCallId: "c", timestamp: ts },
  finished({ outcome: { type: "success", pendingToolCallIds: ["c"] } }),
]);

for (const client of CLIENTS) {
  describe(`harness self-check with ${client.name}`, () => {
    test(`[${client.version}] a clean stream passes`, async () => {
      await run(newAgent(client, `${base}/ok`, { prompt: "hi" }));
    });

    test(`[${client.version}] a state patch the client cannot apply fails the run`, async () => {
      await assert.rejects(run(newAgent(client, `${base}/bad-patch`, { prompt: "hi" })), /Failed to apply state patch/);
    });

    test(`[${client.version}] a null optional field fails the run`, async () => {
      await assert.rejects(run(newAgent(client, `${base}/null-name`, { prompt: "hi" })), /runAgent\(\) rejected/);
    });

    if (client.protocol10) {
      test(`[${client.version}] an [ag-ui][enforce] warning fails the run`, async () => {
        await assert.rejects(
          run(newAgent(client, `${base}/unknown-field`, { prompt: "hi" })),
          /\[ag-ui\]\[enforce\]/,
        );
      });
      test(`[${client.version}] accepts outcome.pendingToolCallIds`, async () => {
        await run(newAgent(client, `${base}/pending-ids`, { prompt: "hi" }));
      });
    } else {
      test(`[${client.version}] rejects outcome.pendingToolCallIds (why the server omits it)`, async () => {
        await assert.rejects(run(newAgent(client, `${base}/pending-ids`, { prompt: "hi" })), /runAgent\(\) rejected/);
      });
    }
  });
}
