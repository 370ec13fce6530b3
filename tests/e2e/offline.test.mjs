// The offline model: the binary with no OPENAI_* variable and no configuration file at all (the
// embedded config/default.toml), as a fresh checkout runs it. Both clients must accept its
// streams as they are.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { CLIENTS, newAgent, ofType, run, serverErrors, startServer, types } from "./harness.mjs";

const TIMEOUT = 30_000;
let server;

before(async () => {
  server = await startServer({ configFile: null });
});

after(async () => {
  await server?.stop();
});

test("without OPENAI_* the server says it uses the offline model", async () => {
  const res = await fetch(`${server.url}/health`);
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { status: "ok" });
  assert.match(server.log(), /offline/i, server.log());
});

for (const client of CLIENTS) {
  describe(`offline model with ${client.name}`, () => {
    test(`[${client.version}] offline model: plain chat`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${server.url}/`, { prompt: "Hi there!" });

      const { events } = await run(agent);

      assert.equal(types(events)[0], "RUN_STARTED");
      assert.equal(types(events).at(-1), "RUN_FINISHED");
      assert.deepEqual(agent.messages.map((m) => m.role), ["user", "assistant"]);
      const reply = agent.messages[1];
      assert.match(reply.content, /offline model/);
      assert.equal(
        reply.content,
        ofType(events, "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join(""),
      );
    });

    test(`[${client.version}] offline model: the default agent's get_weather server tool`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${server.url}/`, { prompt: "get_weather Paris" });

      const { events } = await run(agent);

      assert.equal(types(events).at(-1), "RUN_FINISHED");
      const roles = agent.messages.map((m) => m.role);
      assert.deepEqual(roles.slice(0, 3), ["user", "assistant", "tool"], JSON.stringify(agent.messages));
      assert.equal(roles.at(-1), "assistant");
      const call = agent.messages[1].toolCalls?.[0];
      assert.equal(call?.function.name, "get_weather", JSON.stringify(agent.messages[1]));
      const result = agent.messages[2];
      assert.equal(result.toolCallId, call.id);
      assert.ok(JSON.parse(result.content), "the static result is JSON");
      assert.ok(agent.messages.at(-1).content.length > 0, "a final text answer");
    });
  });
}

test("the offline server logged no error and no panic", () => {
  assert.deepEqual(serverErrors(server.log()), []);
});
