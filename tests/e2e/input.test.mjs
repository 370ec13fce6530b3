// End-to-end tests of asking the user (input tools) through the real AG-UI clients.
//
// The agent `scheduler` (agents.toml) has an input tool, `pick_meeting_time`: when the fake
// model calls it, the call is streamed and the run ends asking the user for a time slot.
//   - @ag-ui/client 1.0.0 gets an `input_required` interrupt with the tool's responseSchema,
//     recorded by the client's own reducer in agent.pendingInterrupts, and answers it through
//     runAgent({ resume }) with the client's buildResumeArray().
//   - @ag-ui/client 0.0.59 (CopilotKit's) gets a client tool call `request_input`, answered by a
//     tool message with the form's values.
// Either way the answer becomes the ORIGINAL call's TOOL_CALL_RESULT, once over every later
// run, and the model reads it. The client checks every event (enforce, verify, reducer); any
// client warning or error fails the run (harness.mjs).

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { buildResumeArray } from "agui-client-1";

import { textTurn, toolTurn } from "./fake-openai.mjs";
import { CLIENTS, newAgent, ofType, run, types, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;
const TOOL = "pick_meeting_time";
const ARGS = { topic: "the roadmap review", slots: ["Mon 10:00", "Tue 14:00"] };
const ANSWER = { chosen_time: "Tue 14:00", chosen_label: "Tuesday afternoon" };

const env = withFakeUpstreamAndServer();

function assertFinished(events) {
  const t = types(events);
  assert.equal(t[0], "RUN_STARTED", t.join(", "));
  assert.equal(t.at(-1), "RUN_FINISHED", `${t.join(", ")}\n${env.serverLog()}`);
  assert.equal(ofType(events, "RUN_ERROR").length, 0, t.join(", "));
}

/** Every model request after the answer carries it once as the call's result, and nothing of the protocol. */
function assertAnswerHeardOnce(key, callId, from) {
  const requests = env.fake.requests(key);
  assert.ok(requests.length > from, `${requests.length} model requests`);
  for (const [n, body] of requests.slice(from).entries()) {
    const answers = body.messages.filter((m) => m.role === "tool" && m.tool_call_id === callId);
    assert.equal(answers.length, 1, `request #${n + from}: ${JSON.stringify(body.messages, null, 1)}`);
    assert.deepEqual(JSON.parse(answers[0].content), ANSWER);
    const raw = JSON.stringify(body);
    assert.ok(!raw.includes("request_input") && !raw.includes("apr_"), `request #${n + from} holds the input protocol`);
  }
}

/** TOOL_CALL_RESULT events for `callId` over every run. */
function resultsFor(runs, callId) {
  return runs.flatMap((r) => ofType(r.events, "TOOL_CALL_RESULT")).filter((e) => e.toolCallId === callId);
}

const [v1, v0059] = CLIENTS;

describe(v1.name, () => {
  test(`[${v1.version}] input: the run ends with an input_required interrupt; the answer is the result once over later runs`, { timeout: TIMEOUT }, async () => {
    const key = `input-interrupt-${v1.tag}`;
    const callId = `call_pick_${v1.tag}`;
    env.fake.script(
      key,
      toolTurn([{ id: callId, name: TOOL, arguments: ARGS }], ["Let me ", "ask."]),
      textTurn("Booked ", "for Tuesday."),
      textTurn("Everyone."),
      textTurn("Three items."),
      textTurn("Still Tuesday."),
    );
    const agent = newAgent(v1, `${env.server.url}/scheduler`, { prompt: `${key}: book the roadmap review` });

    // Run 1: the question.
    const first = await run(agent);
    assertFinished(first.events);
    assert.equal(ofType(first.events, "TOOL_CALL_RESULT").length, 0);
    const finished = ofType(first.events, "RUN_FINISHED")[0];
    assert.equal(finished.outcome?.type, "interrupt", JSON.stringify(finished));
    const [interrupt] = finished.outcome.interrupts;
    assert.equal(interrupt.reason, "input_required");
    assert.equal(interrupt.toolCallId, callId);
    assert.equal(interrupt.message, "Pick a time for the roadmap review.");
    assert.deepEqual(interrupt.responseSchema.required, ["chosen_time"]);
    assert.deepEqual(interrupt.metadata["agui-host"].arguments, ARGS);
    assert.ok(Date.parse(interrupt.expiresAt) > Date.now(), interrupt.expiresAt);
    assert.deepEqual(agent.pendingInterrupts, [interrupt]);

    // Run 2: the answer, through the client's own API.
    const resume = buildResumeArray(agent.pendingInterrupts, {
      [interrupt.id]: { status: "resolved", payload: ANSWER },
    });
    const second = await run(agent, { resume });
    assertFinished(second.events);
    assert.equal(ofType(second.events, "TOOL_CALL_START").length, 0);
    const [result] = ofType(second.events, "TOOL_CALL_RESULT");
    assert.equal(result.toolCallId, callId);
    assert.deepEqual(JSON.parse(result.content), ANSWER);
    assert.deepEqual(agent.pendingInterrupts, []);
    assert.deepEqual(agent.messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"], JSON.stringify(agent.messages, null, 1));
    assert.equal(agent.messages.at(-1).content, "Booked for Tuesday.");

    // Runs 3 and 4: the conversation goes on; run 5 sends the same answer again.
    const later = [];
    for (const text of ["Who is invited?", "What is on the agenda?"]) {
      agent.addMessage({ id: `u-${later.length}-${v1.tag}`, role: "user", content: text });
      later.push(await run(agent));
    }
    agent.addMessage({ id: `u-replay-${v1.tag}`, role: "user", content: "Is it still on?" });
    later.push(await run(agent, { resume }));
    for (const r of later) assertFinished(r.events);
    assert.equal(resultsFor([first, second, ...later], callId).length, 1, "one result for the call");
    assertAnswerHeardOnce(key, callId, 1);
  });
});

describe(v0059.name, () => {
  test(`[${v0059.version}] input: a request_input call is left pending; the page's answer is the result`, { timeout: TIMEOUT }, async () => {
    const key = `input-tool-${v0059.tag}`;
    const callId = `call_pick_${v0059.tag}`;
    env.fake.script(
      key,
      toolTurn([{ id: callId, name: TOOL, arguments: ARGS }], ["Let me ", "ask."]),
      textTurn("Booked ", "for Tuesday."),
      textTurn("Everyone."),
    );
    const agent = newAgent(v0059, `${env.server.url}/scheduler`, { prompt: `${key}: book the roadmap review` });

    const first = await run(agent);
    assertFinished(first.events);
    assert.equal("outcome" in ofType(first.events, "RUN_FINISHED")[0], false);
    const starts = ofType(first.events, "TOOL_CALL_START");
    assert.deepEqual(starts.map((e) => e.toolCallName), [TOOL, "request_input"], types(first.events).join(", "));
    const calls = agent.messages.flatMap((m) => m.toolCalls ?? []);
    const ask = calls.find((c) => c.function.name === "request_input");
    const question = JSON.parse(ask.function.arguments);
    assert.equal(question.toolCallId, callId);
    assert.equal(question.toolName, TOOL);
    assert.equal(question.message, "Pick a time for the roadmap review.");
    assert.deepEqual(question.arguments, ARGS);
    assert.deepEqual(question.responseSchema.required, ["chosen_time"]);

    // Run 2: the page answers with the form's values (as useHumanInTheLoop's respond would).
    agent.addMessage({ id: `answer-${v0059.tag}`, role: "tool", toolCallId: ask.id, content: JSON.stringify(ANSWER) });
    const second = await run(agent);
    assertFinished(second.events);
    const results = ofType(second.events, "TOOL_CALL_RESULT");
    assert.deepEqual(results.map((e) => e.toolCallId), [callId], types(second.events).join(", "));
    assert.deepEqual(JSON.parse(results[0].content), ANSWER);
    assert.equal(agent.messages.at(-1).content, "Booked for Tuesday.");

    // Run 3: the conversation goes on; the answer is not taken again.
    agent.addMessage({ id: `u-next-${v0059.tag}`, role: "user", content: "Who is invited?" });
    const third = await run(agent);
    assertFinished(third.events);
    assert.equal(resultsFor([first, second, third], callId).length, 1);
    assertAnswerHeardOnce(key, callId, 1);
  });
});
