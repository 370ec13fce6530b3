// End-to-end tests of the two other providers: the real @ag-ui/client HttpAgent (1.0.0 and
// 0.0.59) against agents on an Anthropic Messages profile (/claude, with extended thinking) and
// on an OpenAI Responses profile (/reasoner, with reasoning summaries), whose model is the fake
// upstream speaking each dialect (fake-providers.mjs).
//
// As in clients.test.mjs, the clients do the checking (schemas, ordering, reducer) and any
// client warning fails the test; what is asserted is the history the client keeps, its state,
// and what reached the model, on the run and on the run after it.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { startFakeOpenAI } from "./fake-openai.mjs";
import { messagesTurn, responsesTurn } from "./fake-providers.mjs";
import { CLIENTS, newAgent, ofType, run, serverErrors, startServer, types, userMessage } from "./harness.mjs";

const TIMEOUT = 30_000;
const WEATHER = { city: "Paris", temperature: 21, conditions: "sunny" };
const RECIPE = { title: "Lettuce wraps", ingredients: ["chicken", "lettuce"], steps: ["Slice.", "Sear.", "Wrap."] };

const env = {};
before(async () => {
  env.fake = await startFakeOpenAI();
  env.server = await startServer({
    upstream: env.fake.baseUrl,
    extraEnv: {
      APP_MODELS__CLAUDE__BASE_URL: env.fake.baseUrl,
      APP_MODELS__REASONER__BASE_URL: env.fake.baseUrl,
    },
  });
});
after(async () => {
  await env.server?.stop();
  await env.fake?.close();
});

/** How each dialect's upstream request holds the conversation. */
const PROVIDERS = [
  {
    name: "Anthropic Messages",
    route: "/claude",
    path: "messages",
    thinkingTurn: (key, { calls = [], text = [] }) =>
      messagesTurn({ thinking: `Thinking about ${key}.`, signature: `sig-${key}`, calls, text }),
    turn: (opts) => messagesTurn(opts),
    /** The signed thinking the request sends back, if any. */
    sentBackReasoning: (body) =>
      body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).filter((b) => b.type === "thinking"),
    sealed: (key) => `sig-${key}`,
    reasoningText: (key) => `Thinking about ${key}.`,
    toolResults: (body) =>
      body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).filter((b) => b.type === "tool_result"),
  },
  {
    name: "OpenAI Responses",
    route: "/reasoner",
    path: "responses",
    thinkingTurn: (key, { calls = [], text = [] }) =>
      responsesTurn({ summary: [`Thinking about ${key}.`], encrypted: `enc-${key}`, calls, text }),
    turn: (opts) => responsesTurn(opts),
    sentBackReasoning: (body) => body.input.filter((i) => i.type === "reasoning"),
    sealed: (key) => `openai-responses:rs_e2e:enc-${key}`,
    reasoningText: (key) => `Thinking about ${key}.`,
    toolResults: (body) => body.input.filter((i) => i.type === "function_call_output"),
  },
];

function assertLifecycle(events) {
  const t = types(events);
  assert.equal(t[0], "RUN_STARTED", t.join(", "));
  assert.equal(t.at(-1), "RUN_FINISHED", t.join(", "));
  assert.equal(ofType(events, "RUN_ERROR").length, 0, t.join(", "));
}

for (const provider of PROVIDERS) {
  for (const client of CLIENTS) {
    describe(`${provider.name} / ${client.name}`, () => {
      test(`[${client.version}] reasoning, a server tool, the answer, and the run after it`, { timeout: TIMEOUT }, async () => {
        const key = `${provider.path}-tool-${client.tag}`;
        const callId = `call_${key}`;
        env.fake.script(
          key,
          provider.thinkingTurn(key, { calls: [{ id: callId, name: "get_weather", arguments: { location: "Paris" } }] }),
          provider.turn({ text: ["It is ", "sunny."] }),
          provider.turn({ text: ["You are ", "welcome."] }),
        );
        const agent = newAgent(client, `${env.server.url}${provider.route}`, { prompt: `${key}: weather?` });

        const { events } = await run(agent);

        assertLifecycle(events);
        const reasoning = ofType(events, "REASONING_MESSAGE_CONTENT").map((e) => e.delta).join("");
        assert.equal(reasoning, provider.reasoningText(key));
        const sealed = ofType(events, "REASONING_ENCRYPTED_VALUE");
        assert.equal(sealed.length, 1, types(events).join(", "));
        assert.equal(sealed[0].encryptedValue, provider.sealed(key));
        const conversation = agent.messages.filter((m) => m.role !== "reasoning");
        assert.deepEqual(conversation.map((m) => m.role), ["user", "assistant", "tool", "assistant"], JSON.stringify(agent.messages));
        assert.equal(conversation[1].toolCalls[0].id, callId);
        assert.deepEqual(JSON.parse(conversation[2].content), WEATHER);
        assert.equal(conversation[3].content, "It is sunny.");

        // Within the run, the model got its reasoning back with the call, and the result.
        const requests = env.fake.requests(key);
        assert.equal(requests.length, 2, env.server.log());
        assert.equal(provider.sentBackReasoning(requests[1]).length, 1, JSON.stringify(requests[1]));
        assert.equal(provider.toolResults(requests[1]).length, 1, JSON.stringify(requests[1]));

        // The next run, from the history the client kept.
        agent.addMessage(userMessage("Thanks!"));
        const next = await run(agent);
        assertLifecycle(next.events);
        assert.equal(agent.messages.at(-1).content, "You are welcome.");
        const third = env.fake.requests(key)[2];
        assert.equal(provider.toolResults(third).length, 1, JSON.stringify(third));
        if (client.protocol10) {
          // The 1.0 client keeps the reasoning message with its encrypted value and sends it back.
          const kept = agent.messages.find((m) => m.role === "reasoning");
          assert.equal(kept?.encryptedValue, provider.sealed(key), JSON.stringify(agent.messages));
          assert.equal(provider.sentBackReasoning(third).length, 1, JSON.stringify(third));
        }
        assert.deepEqual(serverErrors(env.server.log()), []);
      });

      test(`[${client.version}] predictive state from the streamed arguments`, { timeout: TIMEOUT }, async () => {
        const key = `${provider.path}-predict-${client.tag}`;
        env.fake.script(
          key,
          provider.turn({ calls: [{ id: `call_${key}`, name: "update_recipe", arguments: { recipe: RECIPE } }] }),
          provider.turn({ text: ["Saved."] }),
        );
        const agent = newAgent(client, `${env.server.url}${provider.route}`, { prompt: `${key}: a recipe`, state: {} });

        const { events } = await run(agent);

        assertLifecycle(events);
        assert.ok(ofType(events, "STATE_DELTA").length > 3, types(events).join(", "));
        assert.deepEqual(agent.state.recipe, RECIPE);
        assert.equal(agent.messages.at(-1).content, "Saved.");
      });
    });
  }
}
