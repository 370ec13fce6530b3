// End-to-end test of threads the server remembers, through both real clients (@ag-ui/client
// 1.0.0 and the 0.0.59 CopilotKit ships).
//
// A page that reloads has only its thread id. A fresh HttpAgent with that id and no messages
// runs once: the server answers from its thread store with MESSAGES_SNAPSHOT and
// STATE_SNAPSHOT, without calling the model, and the client's own reducer rebuilds the
// conversation and the state from them. The next run continues the conversation.

import { test } from "node:test";
import assert from "node:assert/strict";

import { textTurn, toolTurn } from "./fake-openai.mjs";
import { CLIENTS, newAgent, ofType, run, types, userMessage, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;
const env = withFakeUpstreamAndServer();

/** What a conversation is, whatever optional fields a client fills in. */
function shape(messages) {
  return messages.map((m) => ({
    id: m.id,
    role: m.role,
    content: m.content ?? null,
    toolCalls: (m.toolCalls ?? []).map((c) => [c.id, c.function.name, c.function.arguments]),
    toolCallId: m.toolCallId ?? null,
  }));
}

for (const client of CLIENTS) {
  test(`[${client.version}] threads: a fresh HttpAgent with only the threadId gets the conversation and state back, and continues it`, { timeout: TIMEOUT }, async () => {
    const key = `threads-hydrate-${client.tag}`;
    env.fake.script(
      key,
      toolTurn([{ id: `call_weather_${client.tag}`, name: "get_weather", arguments: { location: "Paris" } }]),
      textTurn("It is ", "sunny in Paris."),
      textTurn("Still sunny."),
    );
    const page = newAgent(client, `${env.server.url}/`, { prompt: `${key}: weather in Paris?`, state: { city: "Paris" } });
    await run(page);
    assert.deepEqual(page.messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
    assert.equal(env.fake.requests(key).length, 2);

    // The reload: a new agent, the same thread id, nothing else.
    const reloaded = new client.HttpAgent({ url: `${env.server.url}/`, threadId: page.threadId });
    const hydrate = await run(reloaded);
    assert.deepEqual(types(hydrate.events), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]);
    assert.deepEqual(shape(reloaded.messages), shape(page.messages), JSON.stringify(reloaded.messages, null, 1));
    assert.deepEqual(reloaded.state, { city: "Paris" });
    if (client.protocol10) assert.deepEqual(ofType(hydrate.events, "RUN_FINISHED")[0].outcome, { type: "success" });
    assert.equal(env.fake.requests(key).length, 2, "a hydrate never calls the model");

    // It goes on from there: the model sees the whole conversation, the server's tool result too.
    reloaded.addMessage(userMessage("And tomorrow?"));
    const next = await run(reloaded);
    assert.equal(ofType(next.events, "RUN_ERROR").length, 0, types(next.events).join(", "));
    assert.equal(reloaded.messages.at(-1).content, "Still sunny.");
    const requests = env.fake.requests(key);
    assert.equal(requests.length, 3);
    const history = requests[2].messages.filter((m) => m.role !== "system");
    assert.deepEqual(history.map((m) => m.role), ["user", "assistant", "tool", "assistant", "user"]);
    assert.match(history[2].content, /sunny/);
  });
}
