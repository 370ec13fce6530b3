// End-to-end test of resumable runs through both real clients (@ag-ui/client 1.0.0 and the
// 0.0.59 CopilotKit ships).
//
// A small proxy stands between the client and the server: it forwards the client's run, cuts
// the server's stream after a few frames, reconnects with GET /<agent>/runs/<runId>/events and
// `Last-Event-ID: <the last id it passed on>`, and pipes the rest to the client as if nothing
// had happened. The client must accept the stitched stream (its verifier, its reducer) and end
// with the same conversation as a client that read the run uninterrupted. With the Redis store,
// the proxy reconnects to a second server process sharing the Redis: the stitched stream comes
// from two replicas.

import http from "node:http";
import { test, before, after } from "node:test";
import assert from "node:assert/strict";

import { textTurn } from "./fake-openai.mjs";
import { CLIENTS, newAgent, run, startRedis, startServer, types, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;
const env = withFakeUpstreamAndServer();

/** Frames the proxy lets through before it cuts the first connection. */
const FRAMES_BEFORE_CUT = 4;

/**
 * Starts the cutting proxy: runs go to `serverUrl`, reconnects to `resumeUrl` (the same server
 * by default). Resolves to { url, reconnects, close }.
 */
async function startCuttingProxy(serverUrl, resumeUrl = serverUrl) {
  const state = { reconnects: [] };
  const proxy = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = Buffer.concat(chunks).toString("utf8");
    const runId = JSON.parse(body).runId;
    const agentPath = new URL(req.url, "http://x").pathname.replace(/\/$/, "") || "/e2e";
    const first = new AbortController();
    const upstream = await fetch(`${serverUrl}${agentPath}`, {
      method: "POST",
      // The proxy reconnects after its cut, so it asks the run to go on meanwhile (a plain
      // disconnect stops a run).
      headers: {
        "content-type": "application/json",
        accept: "text/event-stream",
        "x-agui-on-disconnect": "continue",
      },
      body,
      signal: first.signal,
    });
    res.writeHead(upstream.status, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    let buffer = "";
    let passed = 0;
    let lastId = null;
    const decoder = new TextDecoder();
    const reader = upstream.body.getReader();
    while (passed < FRAMES_BEFORE_CUT) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while (passed < FRAMES_BEFORE_CUT && (end = buffer.indexOf("\n\n")) !== -1) {
        const frame = buffer.slice(0, end + 2);
        buffer = buffer.slice(end + 2);
        const id = frame.match(/^id: (.*)$/m);
        if (id) {
          lastId = id[1];
          passed += 1;
        }
        res.write(frame);
      }
    }
    // The cut: whatever else the first connection carries is dropped unread.
    first.abort();
    state.reconnects.push(lastId);
    const rest = await fetch(`${resumeUrl}${agentPath}/runs/${encodeURIComponent(runId)}/events`, {
      headers: { "last-event-id": lastId },
    });
    assert.equal(rest.status, 200);
    for await (const chunk of rest.body) res.write(chunk);
    res.end();
  });
  await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${proxy.address().port}`,
    reconnects: state.reconnects,
    close: () => new Promise((resolve) => proxy.close(resolve)),
  };
}

let proxy;
after(async () => {
  await proxy?.close();
});

for (const client of CLIENTS) {
  test(`[${client.version}] resumable: a stream cut mid-run and resumed with Last-Event-ID is accepted whole`, { timeout: TIMEOUT }, async () => {
    proxy ??= await startCuttingProxy(env.server.url);
    const parts = ["Once ", "upon ", "a ", "time ", "a ", "stream ", "was ", "cut ", "and ", "resumed."];
    const key = `resumable-${client.tag}`;
    env.fake.script(key, textTurn(...parts));
    env.fake.script(`${key}-whole`, textTurn(...parts));

    const whole = newAgent(client, `${env.server.url}/e2e`, { prompt: `${key}-whole: a story` });
    const direct = await run(whole);

    const resumed = newAgent(client, `${proxy.url}/e2e`, { prompt: `${key}: a story` });
    const stitched = await run(resumed);

    assert.equal(proxy.reconnects.length > 0, true, "the proxy cut and reconnected");
    assert.match(proxy.reconnects.at(-1), /:\d+$/);
    assert.deepEqual(types(stitched.events), types(direct.events), env.serverLog());
    const answer = resumed.messages.at(-1);
    assert.equal(answer.role, "assistant");
    assert.equal(answer.content, parts.join(""));
    assert.equal(answer.content, whole.messages.at(-1).content);
  });
}

// Two replicas on one Redis: A runs the run, B serves the reconnect from the shared log.
const replicas = {};
before(async () => {
  replicas.redis = await startRedis();
  const extraEnv = { APP_THREADS__STORE: "redis", APP_THREADS__REDIS_URL: replicas.redis.url };
  const upstream = () => env.fake.baseUrl;
  replicas.a = await startServer({ upstream: upstream(), extraEnv });
  replicas.b = await startServer({ upstream: upstream(), extraEnv });
  replicas.proxy = await startCuttingProxy(replicas.a.url, replicas.b.url);
});
after(async () => {
  await replicas.proxy?.close();
  await replicas.a?.stop();
  await replicas.b?.stop();
  await replicas.redis?.stop();
});

for (const client of CLIENTS) {
  test(`[${client.version}] resumable on Redis: a stream cut on replica A and resumed on replica B is accepted whole`, { timeout: TIMEOUT }, async () => {
    const parts = ["Two ", "replicas ", "told ", "one ", "story ", "with ", "no ", "seam."];
    const key = `resumable-redis-${client.tag}`;
    env.fake.script(key, textTurn(...parts));
    env.fake.script(`${key}-whole`, textTurn(...parts));

    const whole = newAgent(client, `${replicas.a.url}/e2e`, { prompt: `${key}-whole: a story` });
    const direct = await run(whole);

    const reconnectsBefore = replicas.proxy.reconnects.length;
    const resumed = newAgent(client, `${replicas.proxy.url}/e2e`, { prompt: `${key}: a story` });
    const stitched = await run(resumed);

    assert.equal(replicas.proxy.reconnects.length, reconnectsBefore + 1, "the proxy cut and reconnected to B");
    const log = () => `A:\n${replicas.a.log().slice(-3000)}\nB:\n${replicas.b.log().slice(-3000)}`;
    assert.deepEqual(types(stitched.events), types(direct.events), log());
    const answer = resumed.messages.at(-1);
    assert.equal(answer.role, "assistant");
    assert.equal(answer.content, parts.join(""));
    assert.equal(answer.content, whole.messages.at(-1).content);
  });
}
