// UI from the server with both real clients and the offline model (the embedded demo routes):
// an A2UI surface from a fixed tool and from generate_a2ui (its inner render_a2ui call streamed
// under the calling message), the recovery failure, and a background task's activity. Each
// client keeps the history it builds and sends it back on the next run, which must be accepted
// and answered.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { CLIENTS, newAgent, ofType, run, serverErrors, startServer, types, userMessage } from "./harness.mjs";

const TIMEOUT = 30_000;
let server;

before(async () => {
  server = await startServer({ configFile: null });
});

after(async () => {
  await server?.stop();
});

/** The `a2ui_operations` envelope the call named `name` was answered with, from the history. */
function envelopeOf(agent, name) {
  const call = agent.messages
    .flatMap((m) => m.toolCalls ?? [])
    .find((c) => c.function.name === name);
  assert.ok(call, `a ${name} call in ${JSON.stringify(agent.messages)}`);
  const result = agent.messages.find((m) => m.role === "tool" && m.toolCallId === call.id);
  assert.ok(result, `a result for ${call.id}`);
  return JSON.parse(result.content);
}

for (const client of CLIENTS) {
  describe(`A2UI and background demo routes with ${client.name}`, () => {
    test(`[${client.version}] a fixed surface, then the next run`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${server.url}/a2ui_fixed_schema`, {
        prompt: "Find flights from SFO to JFK for next Tuesday.",
      });
      const { events } = await run(agent);
      assert.equal(types(events).at(-1), "RUN_FINISHED");
      const envelope = envelopeOf(agent, "search_flights");
      assert.equal(envelope.a2ui_operations[0].createSurface.surfaceId, "flight-search-results");
      assert.match(JSON.stringify(envelope), /UA 123/);

      agent.addMessage(userMessage("Find hotels in downtown Manhattan."));
      const second = await run(agent);
      assert.equal(types(second.events).at(-1), "RUN_FINISHED");
      assert.match(JSON.stringify(envelopeOf(agent, "search_hotels")), /The Manhattan Grand/);
    });

    test(`[${client.version}] a generated surface streams its inner call, then the next run`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${server.url}/a2ui_dynamic_schema`, {
        prompt: "Compare 3 hotels with ratings and prices.",
      });
      const { events } = await run(agent);
      assert.equal(types(events).at(-1), "RUN_FINISHED");
      const starts = ofType(events, "TOOL_CALL_START");
      const outer = starts.find((s) => s.toolCallName === "generate_a2ui");
      const inner = starts.find((s) => s.toolCallName === "render_a2ui");
      assert.ok(outer && inner, types(events).join(", "));
      assert.equal(inner.parentMessageId, outer.parentMessageId);
      // The client put the inner call on the message that made the outer one.
      const message = agent.messages.find((m) => m.id === outer.parentMessageId);
      assert.deepEqual(
        message.toolCalls.map((c) => c.function.name),
        ["generate_a2ui", "render_a2ui"],
      );
      const envelope = envelopeOf(agent, "generate_a2ui");
      assert.equal(envelope.a2ui_operations[0].createSurface.surfaceId, "hotel-comparison");
      assert.match(JSON.stringify(envelope), /Boutique Loft/);

      agent.addMessage(userMessage("Thanks!"));
      const second = await run(agent);
      assert.equal(types(second.events).at(-1), "RUN_FINISHED");
      assert.ok(agent.messages.at(-1).content.length > 0);
    });

    test(`[${client.version}] a surface that never validates ends in the failure result and the chat goes on`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${server.url}/a2ui_recovery`, {
        prompt: "Compare 3 broken hotels with ratings and prices.",
      });
      const { events } = await run(agent);
      assert.equal(types(events).at(-1), "RUN_FINISHED");
      const failure = envelopeOf(agent, "generate_a2ui");
      assert.equal(failure.code, "a2ui_recovery_exhausted");
      assert.equal(failure.attempts.length, 3);

      agent.addMessage(userMessage("Thanks anyway."));
      const second = await run(agent);
      assert.equal(types(second.events).at(-1), "RUN_FINISHED");
    });

    test(`[${client.version}] a background task answers at once and tracks itself as an activity`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${server.url}/background_agents`, {
        prompt: "Research the Solana ecosystem for me.",
      });
      const { events } = await run(agent);
      assert.equal(types(events).at(-1), "RUN_FINISHED");
      const activity = ofType(events, "ACTIVITY_SNAPSHOT")[0];
      assert.equal(activity?.activityType, "agui-host.background", types(events).join(", "));
      assert.equal(activity.content.status, "running");
      const call = agent.messages.flatMap((m) => m.toolCalls ?? [])[0];
      const handle = JSON.parse(agent.messages.find((m) => m.toolCallId === call.id).content);
      assert.equal(handle.status, "started");
    });
  });
}

test("the server logged no error and no panic", () => {
  assert.deepEqual(serverErrors(server.log()), []);
});
