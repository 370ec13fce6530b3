// End-to-end tests of the dojo's chat variants, agentic_chat_reasoning and
// agentic_chat_multimodal (demo agents, on by default), with both real clients: a reasoning
// model's thinking as REASONING_* events, and an image attached to the user message, each
// followed into the next run with the history the client keeps.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { turn, textTurn } from "./fake-openai.mjs";
import { CLIENTS, newAgent, ofType, run, serverErrors, types, userMessage, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;

const env = withFakeUpstreamAndServer();

/** A complete 1×1 PNG. */
const PNG_1X1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

const REASONING_SHAPE = [
  "REASONING_START",
  "REASONING_MESSAGE_START",
  "REASONING_MESSAGE_CONTENT",
  "REASONING_MESSAGE_END",
  "REASONING_END",
];

function reasoningShape(events) {
  return types(events)
    .filter((t) => t.startsWith("REASONING_"))
    .filter((t, i, all) => t !== all[i - 1]);
}

function conversation(body) {
  return body.messages.filter((m) => m.role !== "system");
}

for (const client of CLIENTS) {
  describe(client.name, () => {
    test(`[${client.version}] reasoning: the client applies the span, then the answer; the next run goes on`, { timeout: TIMEOUT }, async () => {
      const key = `reasoning-${client.tag}`;
      const thinking = ["Reliability ", "and value ", "matter most."];
      env.fake.script(
        key,
        turn({ reasoning: thinking, text: ["The Toyota ", "Camry."] }),
        turn({ reasoning: ["Same criteria."], reasoningField: "reasoning", text: ["The Honda Civic."] }),
      );
      const agent = newAgent(client, `${env.server.url}/agentic_chat_reasoning`, {
        prompt: `${key}: what is the best car to buy?`,
      });

      const first = await run(agent);

      assert.deepEqual(reasoningShape(first.events), REASONING_SHAPE);
      assert.equal(
        ofType(first.events, "REASONING_MESSAGE_CONTENT").map((e) => e.delta).join(""),
        thinking.join(""),
      );
      const typesOfFirst = types(first.events);
      assert.ok(
        typesOfFirst.indexOf("REASONING_END") < typesOfFirst.indexOf("TEXT_MESSAGE_START"),
        typesOfFirst.join(", "),
      );
      const answer = agent.messages.find((m) => m.role === "assistant");
      assert.equal(answer.content, "The Toyota Camry.");
      // Both generations know REASONING_* (0.0.59 too) and keep a `reasoning` message.
      const reasoning = agent.messages.filter((m) => m.role === "reasoning");
      assert.deepEqual(reasoning.map((m) => m.content), [thinking.join("")], JSON.stringify(agent.messages));

      // The client sends back what it keeps; the model gets the conversation without reasoning.
      agent.addMessage(userMessage("And a cheaper one?"));
      const second = await run(agent);

      assert.deepEqual(reasoningShape(second.events), REASONING_SHAPE);
      assert.equal(agent.messages.at(-1).content, "The Honda Civic.");
      const requests = env.fake.requests(key);
      assert.equal(requests.length, 2, env.serverLog());
      assert.deepEqual(conversation(requests[1]).map((m) => m.role), ["user", "assistant", "user"]);
      assert.ok(!JSON.stringify(requests[1]).includes("matter most"), "reasoning is not replayed upstream");
    });

    test(`[${client.version}] multimodal: an attached image reaches the model as an image_url part, now and in the next run`, { timeout: TIMEOUT }, async () => {
      const key = `multimodal-${client.tag}`;
      env.fake.script(key, textTurn("A single ", "grey pixel."), textTurn("It is grey."));
      const agent = newAgent(client, `${env.server.url}/agentic_chat_multimodal`);
      agent.addMessage(
        userMessage([
          { type: "text", text: `${key}: what do you see in this image?` },
          { type: "image", source: { type: "data", value: PNG_1X1, mimeType: "image/png" } },
        ]),
      );

      await run(agent);

      assert.equal(agent.messages.at(-1).content, "A single grey pixel.");
      agent.addMessage(userMessage("What colour is it?"));
      await run(agent);

      assert.equal(agent.messages.at(-1).content, "It is grey.");
      const requests = env.fake.requests(key);
      assert.equal(requests.length, 2, env.serverLog());
      for (const request of requests) {
        const [first] = conversation(request);
        assert.deepEqual(first.content, [
          { type: "text", text: `${key}: what do you see in this image?` },
          { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_1X1}` } },
        ]);
      }
    });
  });
}

test("no model request went unscripted", () => {
  assert.deepEqual(env.fake.unmatched, []);
});

test("the server logged no error and no panic", () => {
  assert.deepEqual(serverErrors(env.server.log()), []);
});
