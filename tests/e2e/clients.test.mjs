// End-to-end tests: the real @ag-ui/client HttpAgent (1.0.0 and 0.0.59, the one CopilotKit
// ships) against the agui-host binary, whose model is the fake OpenAI server.
//
// The clients do the checking: their schemas (enforce), their ordering rules (verify) and their
// reducer (messages and state). A test fails when runAgent() rejects unexpectedly or when the
// client prints any warning or error. What is asserted here is the result: agent.messages,
// agent.state, the events the client applied, and what reached the model.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { burst, textTurn, toolTurn, turn } from "./fake-openai.mjs";
import {
  CLIENTS,
  newAgent,
  ofType,
  run,
  runExpectingRejection,
  serverErrors,
  withFakeUpstreamAndServer,
  types,
  userMessage,
} from "./harness.mjs";

const TIMEOUT = 30_000;

const env = withFakeUpstreamAndServer();

const WEATHER = { city: "Paris", temperature: 21, conditions: "sunny" };

const CHANGE_BACKGROUND = {
  name: "change_background",
  description: "Change the page background.",
  parameters: {
    type: "object",
    required: ["background"],
    properties: { background: { type: "string", description: "A CSS background" } },
  },
};

/** Upstream messages without the system prompt. */
function conversation(body) {
  return body.messages.filter((m) => m.role !== "system");
}

function systemPrompt(body) {
  return body.messages
    .filter((m) => m.role === "system")
    .map((m) => (typeof m.content === "string" ? m.content : JSON.stringify(m.content)))
    .join("\n");
}

function assertLifecycle(events) {
  const t = types(events);
  assert.equal(t[0], "RUN_STARTED", `first event: ${t.join(", ")}`);
  assert.equal(t.at(-1), "RUN_FINISHED", `last event: ${t.join(", ")}`);
  assert.equal(ofType(events, "RUN_FINISHED").length, 1, t.join(", "));
  assert.equal(ofType(events, "RUN_ERROR").length, 0, t.join(", "));
}

test("the installed clients are the pinned versions, each with its own @ag-ui/core", () => {
  const [v1, v0059] = CLIENTS;
  assert.equal(v1.installed, "1.0.0");
  assert.equal(v1.core, "1.0.0");
  assert.equal(v0059.installed, "0.0.59");
  assert.equal(v0059.core, "0.0.59");
  assert.notEqual(v1.HttpAgent, v0059.HttpAgent);
});

for (const client of CLIENTS) {
  describe(client.name, () => {
    test(`[${client.version}] text chat: the assistant message is the scripted deltas`, { timeout: TIMEOUT }, async () => {
      const key = `text-chat-${client.tag}`;
      const deltas = ["Hello", ", wor", "ld! ", "Ünïcödé ✓ ", "🚀"];
      env.fake.script(key, textTurn(...deltas));
      const agent = newAgent(client, `${env.server.url}/`, { prompt: `${key}: say hello` });

      const { events, result } = await run(agent);

      assertLifecycle(events);
      assert.equal(agent.messages.length, 2, JSON.stringify(agent.messages));
      const [user, reply] = agent.messages;
      assert.equal(user.role, "user");
      assert.equal(reply.role, "assistant");
      assert.equal(reply.content, deltas.join(""));
      assert.ok(!reply.toolCalls || reply.toolCalls.length === 0, JSON.stringify(reply));
      assert.deepEqual(
        ofType(events, "TEXT_MESSAGE_CONTENT").map((e) => e.delta),
        deltas,
        "one TEXT_MESSAGE_CONTENT per upstream delta",
      );
      assert.deepEqual(result.newMessages.map((m) => m.role), ["assistant"]);

      const finished = ofType(events, "RUN_FINISHED")[0];
      if (client.protocol10) {
        assert.deepEqual(finished.outcome, { type: "success" });
        assert.equal(ofType(events, "RUN_STARTED")[0].protocolVersion, "1.0");
      } else {
        assert.equal("outcome" in finished, false, JSON.stringify(finished));
        assert.equal("usage" in finished, false, JSON.stringify(finished));
      }

      const requests = env.fake.requests(key);
      assert.equal(requests.length, 1, env.serverLog());
      assert.equal(requests[0].stream, true);
      assert.deepEqual(
        conversation(requests[0]).map((m) => [m.role, m.content]),
        [["user", `${key}: say hello`]],
      );
      assert.match(systemPrompt(requests[0]), /end-to-end test agent/);
    });

    test(`[${client.version}] backend tool: the call and its result, then the final text`, { timeout: TIMEOUT }, async () => {
      const key = `backend-tool-${client.tag}`;
      const callId = `call_weather_${client.tag}`;
      const args = { location: "Paris" };
      env.fake.script(
        key,
        toolTurn([{ id: callId, name: "get_weather", arguments: args }], ["Let me ", "check."]),
        textTurn("It is ", "sunny in Paris."),
      );
      const agent = newAgent(client, `${env.server.url}/`, { prompt: `${key}: weather in Paris?` });

      const { events } = await run(agent);

      assertLifecycle(events);
      assert.deepEqual(
        agent.messages.map((m) => m.role),
        ["user", "assistant", "tool", "assistant"],
        JSON.stringify(agent.messages, null, 1),
      );
      const [, call, result, answer] = agent.messages;
      assert.equal(call.content, "Let me check.");
      assert.equal(call.toolCalls.length, 1);
      assert.equal(call.toolCalls[0].id, callId);
      assert.equal(call.toolCalls[0].type, "function");
      assert.equal(call.toolCalls[0].function.name, "get_weather");
      assert.deepEqual(JSON.parse(call.toolCalls[0].function.arguments), args);
      assert.equal(result.toolCallId, callId);
      assert.deepEqual(JSON.parse(result.content), WEATHER);
      assert.equal(answer.content, "It is sunny in Paris.");
      assert.notEqual(answer.id, call.id, "each model call is its own assistant message");
      assert.ok(
        ofType(events, "TOOL_CALL_ARGS").length > 1,
        "the arguments stream in several TOOL_CALL_ARGS",
      );
      const finished = ofType(events, "RUN_FINISHED")[0];
      if (client.protocol10) assert.deepEqual(finished.outcome, { type: "success" });
      else assert.equal("outcome" in finished, false);

      // The model's second call has the call and the result, in that order.
      const requests = env.fake.requests(key);
      assert.equal(requests.length, 2, env.serverLog());
      const second = conversation(requests[1]);
      assert.deepEqual(second.map((m) => m.role), ["user", "assistant", "tool"]);
      assert.equal(second[1].tool_calls[0].id, callId);
      assert.equal(second[1].tool_calls[0].function.name, "get_weather");
      assert.deepEqual(JSON.parse(second[1].tool_calls[0].function.arguments), args);
      assert.equal(second[2].tool_call_id, callId);
      assert.deepEqual(JSON.parse(second[2].content), WEATHER);
    });

    test(`[${client.version}] replies that arrive at once: one delta per message and call, and the next run goes on from them`, { timeout: TIMEOUT }, async () => {
      const key = `burst-${client.tag}`;
      const callId = `call_weather_burst_${client.tag}`;
      const args = { location: "Paris", unit: "celsius" };
      env.fake.script(
        key,
        burst(toolTurn([{ id: callId, name: "get_weather", arguments: args }], ["Let me ", "check ", "the weather."])),
        burst(textTurn("It is ", "sunny ", "in Paris.")),
        textTurn("You ", "are ", "welcome."),
      );
      const agent = newAgent(client, `${env.server.url}/`, { prompt: `${key}: weather in Paris?` });

      const { events } = await run(agent);

      assertLifecycle(events);
      assert.deepEqual(
        ofType(events, "TEXT_MESSAGE_CONTENT").map((e) => e.delta),
        ["Let me check the weather.", "It is sunny in Paris."],
        "one TEXT_MESSAGE_CONTENT per message of a burst",
      );
      assert.equal(ofType(events, "TOOL_CALL_ARGS").length, 1, types(events).join(", "));
      const [, call, result, answer] = agent.messages;
      assert.equal(call.content, "Let me check the weather.");
      assert.deepEqual(JSON.parse(call.toolCalls[0].function.arguments), args);
      assert.equal(result.toolCallId, callId);
      assert.equal(answer.content, "It is sunny in Paris.");

      // The next run, from the history the client kept: the model gets back what it wrote.
      agent.addMessage(userMessage("Thanks!"));
      const next = await run(agent);
      assertLifecycle(next.events);
      assert.equal(agent.messages.at(-1).content, "You are welcome.");
      const requests = env.fake.requests(key);
      assert.equal(requests.length, 3, env.serverLog());
      const third = conversation(requests[2]);
      assert.deepEqual(third.map((m) => m.role), ["user", "assistant", "tool", "assistant", "user"]);
      assert.equal(third[1].content, "Let me check the weather.");
      assert.deepEqual(JSON.parse(third[1].tool_calls[0].function.arguments), args);
      assert.equal(third[3].content, "It is sunny in Paris.");
    });

    test(`[${client.version}] client tool: the run ends with the call pending, the next run carries the result`, { timeout: TIMEOUT }, async () => {
      const key = `client-tool-${client.tag}`;
      const callId = `call_bg_${client.tag}`;
      const args = { background: "linear-gradient(#fa0,#f0a)" };
      env.fake.script(
        key,
        toolTurn([{ id: callId, name: CHANGE_BACKGROUND.name, arguments: args }]),
        textTurn("Done, ", "the background is orange."),
      );
      const agent = newAgent(client, `${env.server.url}/`, { prompt: `${key}: make it orange` });

      // Run 1: the model calls the client tool; the server cannot run it.
      const first = await run(agent, { tools: [CHANGE_BACKGROUND] });

      assertLifecycle(first.events);
      assert.equal(ofType(first.events, "TOOL_CALL_RESULT").length, 0, "no result for a client tool");
      assert.deepEqual(agent.messages.map((m) => m.role), ["user", "assistant"]);
      const call = agent.messages[1].toolCalls;
      assert.equal(call.length, 1);
      assert.equal(call[0].id, callId);
      assert.equal(call[0].function.name, CHANGE_BACKGROUND.name);
      assert.deepEqual(JSON.parse(call[0].function.arguments), args);
      assert.equal(env.fake.requests(key).length, 1, "the run waits for the client, not the model");
      const offered = env.fake.requests(key)[0].tools.map((t) => t.function.name).sort();
      assert.deepEqual(offered, ["change_background", "get_weather"]);

      // Run 2: the client answers the call.
      agent.addMessage({
        id: `tool-result-${client.tag}`,
        role: "tool",
        toolCallId: callId,
        content: "Background changed.",
      });
      const second = await run(agent, { tools: [CHANGE_BACKGROUND] });

      assertLifecycle(second.events);
      assert.deepEqual(agent.messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
      assert.equal(agent.messages[3].content, "Done, the background is orange.");
      const requests = env.fake.requests(key);
      assert.equal(requests.length, 2, env.serverLog());
      const history = conversation(requests[1]);
      assert.deepEqual(history.map((m) => m.role), ["user", "assistant", "tool"]);
      assert.equal(history[1].tool_calls.length, 1);
      assert.equal(history[1].tool_calls[0].id, callId);
      assert.equal(history[1].tool_calls[0].type, "function");
      assert.equal(history[1].tool_calls[0].function.name, CHANGE_BACKGROUND.name);
      assert.deepEqual(JSON.parse(history[1].tool_calls[0].function.arguments), args);
      assert.equal(history[2].tool_call_id, callId);
      assert.equal(history[2].content, "Background changed.");
    });

    test(
      client.protocol10
        ? `[${client.version}] RUN_FINISHED.outcome with pendingToolCallIds is accepted (server and client tool in one turn)`
        : `[${client.version}] RUN_FINISHED has no outcome when a client tool is pending (server and client tool in one turn)`,
      { timeout: TIMEOUT },
      async () => {
        const key = `pending-outcome-${client.tag}`;
        const serverCall = `call_srv_${client.tag}`;
        const clientCall = `call_cli_${client.tag}`;
        env.fake.script(
          key,
          toolTurn([
            { id: serverCall, name: "get_weather", arguments: { location: "Paris" } },
            { id: clientCall, name: CHANGE_BACKGROUND.name, arguments: { background: "blue" } },
          ]),
        );
        const agent = newAgent(client, `${env.server.url}/`, { prompt: `${key}: weather, then paint it blue` });

        const { events, result } = await run(agent, { tools: [CHANGE_BACKGROUND] });

        assertLifecycle(events);
        // The server tool ran, the client tool is left for the client.
        const results = ofType(events, "TOOL_CALL_RESULT");
        assert.deepEqual(results.map((e) => e.toolCallId), [serverCall]);
        const finished = ofType(events, "RUN_FINISHED")[0];
        if (client.protocol10) {
          assert.deepEqual(finished.outcome, { type: "success", pendingToolCallIds: [clientCall] });
          assert.ok(Array.isArray(finished.usage), JSON.stringify(finished));
        } else {
          assert.equal("outcome" in finished, false, JSON.stringify(finished));
        }
        assert.ok(result, "runAgent() resolved with a result object");
        const assistant = agent.messages.find((m) => m.role === "assistant");
        assert.deepEqual(assistant.toolCalls.map((c) => c.id), [serverCall, clientCall]);
        const tools = agent.messages.filter((m) => m.role === "tool");
        assert.deepEqual(tools.map((m) => m.toolCallId), [serverCall]);
        assert.equal(env.fake.requests(key).length, 1, env.serverLog());
      },
    );

    test(`[${client.version}] shared state: a state tool updates agent.state, kept across a text-only run`, { timeout: TIMEOUT }, async () => {
      const key = `shared-state-${client.tag}`;
      const recipe = { title: `Pasta ${client.tag}`, ingredients: ["spaghetti", "tomatoes", "basil"] };
      env.fake.script(
        key,
        toolTurn([{ id: `call_recipe_${client.tag}`, name: "update_recipe", arguments: { recipe } }]),
        textTurn("Recipe ", "saved."),
        textTurn("It serves ", "two."),
      );
      const agent = newAgent(client, `${env.server.url}/recipe`, { prompt: `${key}: a pasta recipe please` });
      const seen = [];
      agent.subscribe({ onStateChanged: ({ state }) => seen.push(structuredClone(state)) });

      // Run 1: the state tool's STATE_DELTA, applied by the client's own reducer.
      const first = await run(agent);

      assertLifecycle(first.events);
      const deltas = ofType(first.events, "STATE_DELTA");
      assert.equal(deltas.length, 1, types(first.events).join(", "));
      assert.deepEqual(agent.state, { recipe });
      const tool = agent.messages.find((m) => m.role === "tool");
      assert.equal(tool.content, "Recipe updated.");
      assert.equal(agent.messages.at(-1).content, "Recipe saved.");
      assert.ok(seen.length >= 1, "onStateChanged fired");

      // Run 2: text only. The client sends its state back; the server validates it, fills the
      // schema default and announces it with a STATE_SNAPSHOT; nothing is lost.
      agent.addMessage(userMessage("How many does it serve?"));
      const second = await run(agent);

      assertLifecycle(second.events);
      assert.deepEqual(agent.state, { recipe: { ...recipe, skill_level: "Beginner" } });
      assert.equal(ofType(second.events, "STATE_DELTA").length, 0);
      assert.equal(agent.messages.at(-1).content, "It serves two.");
      const requests = env.fake.requests(key);
      assert.equal(requests.length, 3, env.serverLog());
      const prompt = systemPrompt(requests[2]);
      assert.ok(prompt.includes(`Pasta ${client.tag}`), `the state is in the prompt of run 2:\n${prompt}`);
      assert.ok(!systemPrompt(requests[0]).includes("Pasta"), "run 1 started with an empty state");
    });

    test(`[${client.version}] predictive state: tool arguments reach agent.state while they stream`, { timeout: TIMEOUT }, async () => {
      const key = `predictive-${client.tag}`;
      const recipe = {
        title: `Crème "brûlée" ${client.tag} 🍮`,
        servings: 4,
        ingredients: [
          { name: "cream", amount: "500 ml" },
          { name: "egg yolks", amount: "6" },
          { name: "sugar", amount: "100 g" },
        ],
        instructions: ["Heat the cream slowly until it steams, then take it off the heat and let it rest."],
      };
      env.fake.script(
        key,
        toolTurn([{ id: `call_predict_${client.tag}`, name: "update_recipe", arguments: { recipe } }]),
        textTurn("Recipe ", "saved."),
      );
      const agent = newAgent(client, `${env.server.url}/writer`, {
        prompt: `${key}: a dessert please`,
        state: { theme: "dark" },
      });
      const seen = [];
      agent.subscribe({ onStateChanged: ({ state }) => seen.push(structuredClone(state)) });

      // The client's own reducer (fast-json-patch, all or nothing) applies every delta; any
      // patch it refused would be logged, and a logged complaint fails the run.
      const { events } = await run(agent);

      assertLifecycle(events);
      const lastArgs = events.findLastIndex((e) => e.type === "TOOL_CALL_ARGS");
      const streaming = events.slice(0, lastArgs).filter((e) => e.type === "STATE_DELTA");
      assert.ok(streaming.length >= 5, `${streaming.length} deltas while the arguments stream`);
      assert.deepEqual(agent.state, { theme: "dark", recipe });
      const counts = seen.map((s) => s.recipe?.ingredients?.length ?? 0);
      assert.ok(counts.includes(1) && counts.includes(2), `the ingredients appeared one by one: ${counts}`);
      assert.ok(seen.every((s) => s.theme === "dark"), "the other keys are never dropped");
      for (const state of seen) {
        const title = state.recipe?.title;
        if (title !== undefined) assert.ok(recipe.title.startsWith(title), `a partial title is a prefix: ${title}`);
      }
    });

    test(`[${client.version}] bad input: a state that breaks the schema makes runAgent() reject with 422`, { timeout: TIMEOUT }, async () => {
      const key = `bad-state-${client.tag}`;
      const agent = newAgent(client, `${env.server.url}/recipe`, {
        prompt: `${key}: hello`,
        state: { recipe: { title: 42 } },
      });

      const { error } = await runExpectingRejection(agent);

      assert.equal(error.status, 422, String(error));
      assert.equal(error.payload?.error?.code, "invalid_state", JSON.stringify(error.payload));
      assert.match(error.payload.error.message, /title/);
      assert.match(error.message, /^HTTP 422/);
      assert.deepEqual(agent.state, { recipe: { title: 42 } }, "the state is left alone");
      assert.equal(env.fake.requests(key).length, 0, "the model is never called");
    });

    test(`[${client.version}] bad input: an invalid client tool name makes runAgent() reject with 422`, { timeout: TIMEOUT }, async () => {
      const key = `bad-tool-${client.tag}`;
      const agent = newAgent(client, `${env.server.url}/`, { prompt: `${key}: hello` });

      const { error } = await runExpectingRejection(agent, {
        tools: [{ ...CHANGE_BACKGROUND, name: "change background!" }],
      });

      assert.equal(error.status, 422, String(error));
      assert.equal(error.payload?.error?.code, "invalid_tool", JSON.stringify(error.payload));
      assert.equal(env.fake.requests(key).length, 0);
    });

    test(`[${client.version}] bad input: an unknown agent makes runAgent() reject with 404`, { timeout: TIMEOUT }, async () => {
      const agent = newAgent(client, `${env.server.url}/no_such_agent`, { prompt: "hello" });

      const { error } = await runExpectingRejection(agent);

      assert.equal(error.status, 404, String(error));
      assert.equal(error.payload?.error?.code, "unknown_agent", JSON.stringify(error.payload));
    });
  });
}

test("no model request went unscripted", () => {
  assert.deepEqual(env.fake.unmatched, []);
});

test("the server logged no error and no panic", () => {
  assert.deepEqual(serverErrors(env.server.log()), []);
});
