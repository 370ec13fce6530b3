// End-to-end tests of human in the loop (approvals) through the real AG-UI clients.
//
// The agent `approvals` (agents.toml) has a server tool, `cancel_subscription`, with
// `approval = "always"`: when the fake model calls it, the call is streamed but not run and the
// run ends waiting for a decision.
//   - @ag-ui/client 1.0.0 gets an interrupt (RUN_FINISHED.outcome.type "interrupt"), which the
//     client's own reducer records in agent.pendingInterrupts; the next run answers it through
//     the client's API: runAgent({ resume }) with an array from the client's buildResumeArray().
//   - @ag-ui/client 0.0.59 (CopilotKit's) gets a client tool call `request_approval`, answered by
//     a tool message {"approved": true}.
// Either way the resumed run runs the tool, answers the ORIGINAL call id with TOOL_CALL_RESULT,
// and the model's follow-up text arrives. The client checks every event (enforce, verify,
// reducer); any client warning or error fails the run (harness.mjs).

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { buildResumeArray } from "agui-client-1";

import { textTurn, toolTurn } from "./fake-openai.mjs";
import { CLIENTS, newAgent, ofType, run, serverErrors, types, userMessage, withFakeUpstreamAndServer } from "./harness.mjs";

const TIMEOUT = 30_000;
const TOOL = "cancel_subscription";
const TOOL_RESULT = "Subscription cancelled.";
const ARGS = { subscription: "Netflix" };

const env = withFakeUpstreamAndServer();

/** Upstream messages without the system prompt. */
function conversation(body) {
  return body.messages.filter((m) => m.role !== "system");
}

function assertLifecycle(events) {
  const t = types(events);
  assert.equal(t[0], "RUN_STARTED", `first event: ${t.join(", ")}`);
  assert.equal(t.at(-1), "RUN_FINISHED", `last event: ${t.join(", ")}`);
  assert.equal(ofType(events, "RUN_FINISHED").length, 1, t.join(", "));
  assert.equal(ofType(events, "RUN_ERROR").length, 0, `${t.join(", ")}\n${env.serverLog()}`);
}

/** What the model saw on the resumed run: one clean call/result pair, no approval protocol. */
function assertCleanHistory(key, callId) {
  const requests = env.fake.requests(key);
  assert.equal(requests.length, 2, `two model calls (the call, then the follow-up)\n${env.serverLog()}`);
  const offered = (requests[0].tools ?? []).map((t) => t.function.name);
  assert.ok(offered.includes(TOOL), `the tool is offered: ${offered}`);
  assert.ok(!offered.includes("request_approval"), `the approval tool is never offered: ${offered}`);
  const history = conversation(requests[1]);
  assert.deepEqual(history.map((m) => m.role), ["user", "assistant", "tool"], JSON.stringify(history, null, 1));
  assert.deepEqual(history[1].tool_calls.map((c) => c.id), [callId]);
  assert.equal(history[1].tool_calls[0].function.name, TOOL);
  assert.deepEqual(JSON.parse(history[1].tool_calls[0].function.arguments), ARGS);
  assert.equal(history[2].tool_call_id, callId);
  assert.equal(history[2].content, TOOL_RESULT);
}

const [v1, v0059] = CLIENTS;

describe(v1.name, () => {
  test(`[${v1.version}] approval: the run ends with an interrupt; resume runs the tool and the model goes on`, { timeout: TIMEOUT }, async () => {
    assert.equal(v1.protocol10, true);
    const key = `approval-interrupt-${v1.tag}`;
    const callId = `call_cancel_${v1.tag}`;
    env.fake.script(
      key,
      toolTurn([{ id: callId, name: TOOL, arguments: ARGS }], ["Cancelling ", "it."]),
      textTurn("Done, ", "Netflix is cancelled."),
    );
    const agent = newAgent(v1, `${env.server.url}/approvals`, { prompt: `${key}: cancel my Netflix` });
    const interruptsSeen = [];
    agent.subscribe({
      onRunFinishedEvent: (params) => {
        if (params.outcome === "interrupt") interruptsSeen.push(structuredClone(params.interrupts));
      },
    });

    // Run 1: the call streams, the tool does not run, the run ends with an interrupt.
    const first = await run(agent);

    assertLifecycle(first.events);
    assert.equal(ofType(first.events, "TOOL_CALL_RESULT").length, 0, "the tool did not run");
    assert.deepEqual(ofType(first.events, "TOOL_CALL_START").map((e) => [e.toolCallId, e.toolCallName]), [[callId, TOOL]]);
    const finished = ofType(first.events, "RUN_FINISHED")[0];
    assert.equal(finished.outcome?.type, "interrupt", JSON.stringify(finished));
    assert.equal(finished.outcome.interrupts.length, 1, JSON.stringify(finished));
    const interrupt = finished.outcome.interrupts[0];
    assert.equal(interrupt.reason, "tool_call");
    assert.equal(interrupt.toolCallId, callId);
    assert.equal(typeof interrupt.id, "string");
    assert.ok(interrupt.id.length > 0);
    assert.equal(typeof interrupt.message, "string");
    assert.match(interrupt.message, /cancel_subscription/);
    assert.deepEqual(interrupt.responseSchema?.required, ["approved"], JSON.stringify(interrupt.responseSchema));
    assert.equal(interrupt.responseSchema?.properties?.approved?.type, "boolean");
    assert.ok(Date.parse(interrupt.expiresAt) > Date.now(), `expiresAt in the future: ${interrupt.expiresAt}`);

    // The client accepted it: its reducer recorded the interrupt, its subscriber saw it.
    assert.deepEqual(agent.pendingInterrupts, [interrupt]);
    assert.deepEqual(interruptsSeen, [[interrupt]]);
    assert.deepEqual(agent.messages.map((m) => m.role), ["user", "assistant"], JSON.stringify(agent.messages, null, 1));
    const call = agent.messages[1];
    assert.equal(call.content, "Cancelling it.");
    assert.deepEqual(call.toolCalls.map((c) => c.id), [callId]);
    assert.deepEqual(JSON.parse(call.toolCalls[0].function.arguments), ARGS);
    assert.equal(env.fake.requests(key).length, 1, "the run waits for the person, not the model");

    // The client itself refuses a run that leaves the interrupt unanswered (no request sent).
    await assert.rejects(() => agent.runAgent(), /pending interrupt/);
    assert.equal(env.fake.requests(key).length, 1);

    // Run 2: resume through the client's own API.
    const resume = buildResumeArray(agent.pendingInterrupts, {
      [interrupt.id]: { status: "resolved", payload: { approved: true } },
    });
    assert.deepEqual(resume, [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }]);
    const second = await run(agent, { resume });

    assertLifecycle(second.events);
    assert.equal(ofType(second.events, "TOOL_CALL_START").length, 0, "no new TOOL_CALL_START for the original call");
    const results = ofType(second.events, "TOOL_CALL_RESULT");
    assert.deepEqual(results.map((e) => e.toolCallId), [callId]);
    assert.equal(results[0].content, TOOL_RESULT);
    assert.deepEqual(ofType(second.events, "RUN_FINISHED")[0].outcome, { type: "success" });
    assert.deepEqual(agent.pendingInterrupts, [], "the interrupt is resolved");

    // The client's reducer put the result right after the original call, then the follow-up.
    assert.deepEqual(
      agent.messages.map((m) => m.role),
      ["user", "assistant", "tool", "assistant"],
      JSON.stringify(agent.messages, null, 1),
    );
    const [, callMessage, result, answer] = agent.messages;
    assert.deepEqual(callMessage.toolCalls.map((c) => c.id), [callId]);
    assert.equal(result.toolCallId, callId);
    assert.equal(result.content, TOOL_RESULT);
    assert.equal(answer.content, "Done, Netflix is cancelled.");
    assert.ok(!answer.toolCalls || answer.toolCalls.length === 0, JSON.stringify(answer));

    assertCleanHistory(key, callId);
  });
});

describe(v0059.name, () => {
  test(`[${v0059.version}] approval: a request_approval call is left pending; answering it runs the tool and the model goes on`, { timeout: TIMEOUT }, async () => {
    assert.equal(v0059.protocol10, false);
    const key = `approval-tool-${v0059.tag}`;
    const callId = `call_cancel_${v0059.tag}`;
    env.fake.script(
      key,
      toolTurn([{ id: callId, name: TOOL, arguments: ARGS }], ["Cancelling ", "it."]),
      textTurn("Done, ", "Netflix is cancelled."),
    );
    const agent = newAgent(v0059, `${env.server.url}/approvals`, { prompt: `${key}: cancel my Netflix` });

    // Run 1: the call streams, the tool does not run; the question is a client tool call.
    const first = await run(agent);

    assertLifecycle(first.events);
    assert.equal(ofType(first.events, "TOOL_CALL_RESULT").length, 0, "nothing ran");
    const finished = ofType(first.events, "RUN_FINISHED")[0];
    assert.equal("outcome" in finished, false, JSON.stringify(finished));
    const starts = ofType(first.events, "TOOL_CALL_START");
    assert.deepEqual(starts.map((e) => e.toolCallName), [TOOL, "request_approval"], types(first.events).join(", "));
    assert.equal(starts[0].toolCallId, callId);

    const calls = agent.messages.flatMap((m) => m.toolCalls ?? []);
    assert.deepEqual(calls.map((c) => c.function.name), [TOOL, "request_approval"], JSON.stringify(agent.messages, null, 1));
    assert.equal(agent.messages.filter((m) => m.role === "tool").length, 0, "both calls are pending");
    const approval = calls[1];
    assert.equal(approval.id, starts[1].toolCallId);
    assert.notEqual(approval.id, callId);
    const question = JSON.parse(approval.function.arguments);
    assert.equal(question.toolCallId, callId);
    assert.equal(question.toolName, TOOL);
    assert.deepEqual(question.arguments, ARGS);
    assert.equal(typeof question.message, "string");
    assert.match(question.message, /cancel_subscription/);
    assert.equal(question.allowEdit, false);
    assert.equal(agent.messages.at(-1).role, "assistant");
    assert.equal(env.fake.requests(key).length, 1, "the run waits for the person, not the model");

    // Run 2: the page answers the approval call (as useHumanInTheLoop would).
    agent.addMessage({
      id: `approval-answer-${v0059.tag}`,
      role: "tool",
      toolCallId: approval.id,
      content: JSON.stringify({ approved: true }),
    });
    const second = await run(agent);

    assertLifecycle(second.events);
    assert.equal(ofType(second.events, "TOOL_CALL_START").length, 0, "no new TOOL_CALL_START for the original call");
    const results = ofType(second.events, "TOOL_CALL_RESULT");
    assert.deepEqual(results.map((e) => e.toolCallId), [callId], types(second.events).join(", "));
    assert.equal(results[0].content, TOOL_RESULT);
    assert.equal("outcome" in ofType(second.events, "RUN_FINISHED")[0], false);

    const toolMessages = agent.messages.filter((m) => m.role === "tool");
    assert.deepEqual(
      toolMessages.map((m) => [m.toolCallId, m.content]).sort(),
      [[approval.id, JSON.stringify({ approved: true })], [callId, TOOL_RESULT]].sort(),
      JSON.stringify(agent.messages, null, 1),
    );
    const answer = agent.messages.at(-1);
    assert.equal(answer.role, "assistant");
    assert.equal(answer.content, "Done, Netflix is cancelled.");

    assertCleanHistory(key, callId);
  });
});

// ---- Exactly once, over the runs that follow the approval --------------------------------------
//
// Ask, answer (approve, decline, edit), then two more messages (for the approval: after its TTL
// has passed), then the answer again (1.0: the same resume; 0.x: the page's answer a second
// time, a double click). The call must get one result: counted as TOOL_CALL_RESULT events for the call across every run (the 0.0.59
// client, like CopilotKit, would fold a repeated result into the message it already has, so its
// messages cannot tell), and as the one result for the call in every later model request.

const TTL_WAIT_MS = 3_100;

function later(events, reply) {
  assertLifecycle(events);
  assert.equal(ofType(events, "TOOL_CALL_START").length, 0, types(events).join(", "));
  const text = ofType(events, "TEXT_MESSAGE_CONTENT").map((e) => e.delta).join("");
  assert.equal(text, reply);
}

/** Every model request after the approval carries the call's one result, and nothing else of it. */
function assertOneResultUpstream(key, callId, from, result) {
  const requests = env.fake.requests(key);
  for (const [n, body] of requests.slice(from).entries()) {
    const answers = conversation(body).filter((m) => m.role === "tool" && m.tool_call_id === callId);
    assert.equal(answers.length, 1, `request #${n + from}: ${JSON.stringify(body.messages, null, 1)}`);
    assert.equal(answers[0].content, result);
    assert.ok(!JSON.stringify(body).includes("request_approval"), `request #${n + from} holds the approval protocol`);
  }
}

function scriptFiveTurns(key, callId) {
  env.fake.script(
    key,
    toolTurn([{ id: callId, name: TOOL, arguments: ARGS }], ["Cancelling ", "it."]),
    textTurn("Done, ", "Netflix is cancelled."),
    textTurn("Hello."),
    textTurn("Goodbye."),
    textTurn("Nothing more to do."),
  );
}

/** How the person answers in run 2, and the result the call gets. */
const DECISIONS = [
  { name: "approved", payload: { approved: true }, result: TOOL_RESULT, waitForTtl: true },
  { name: "declined", payload: { approved: false }, result: null, waitForTtl: false },
  { name: "edited", payload: { approved: true, editedArgs: { subscription: "Spotify" } }, result: TOOL_RESULT, waitForTtl: false },
];

/** Run 2's one TOOL_CALL_RESULT, checked against the decision; returns its content. */
function decided(events, callId, decision) {
  assertLifecycle(events);
  const results = ofType(events, "TOOL_CALL_RESULT");
  assert.deepEqual(results.map((e) => e.toolCallId), [callId], types(events).join(", "));
  if (decision.result === null) assert.notEqual(results[0].content, TOOL_RESULT, "a declined call never runs");
  else assert.equal(results[0].content, decision.result);
  return results[0].content;
}

/** Runs 3 and 4: two more messages, after the approval's TTL when the decision says so. */
async function twoMoreMessages(agent, decision, all) {
  if (decision.waitForTtl) await new Promise((resolve) => setTimeout(resolve, TTL_WAIT_MS));
  for (const [message, reply] of [["thanks, now just say hello", "Hello."], ["and goodbye", "Goodbye."]]) {
    agent.addMessage(userMessage(message));
    const next = await run(agent);
    all.push(...next.events);
    later(next.events, reply);
  }
}

describe(`${v1.name}: exactly once`, () => {
  for (const decision of DECISIONS) {
    test(`[${v1.version}] the ${decision.name} call gets one result over two later messages${decision.waitForTtl ? " (after the TTL)" : ""} and a replayed resume`, { timeout: TIMEOUT }, async () => {
      const key = `approval-once-${decision.name}-${v1.tag}`;
      const callId = `call_once_${decision.name}_${v1.tag}`;
      scriptFiveTurns(key, callId);
      const agent = newAgent(v1, `${env.server.url}/approvals_short_ttl`, { prompt: `${key}: cancel my Netflix` });
      const all = [];

      const first = await run(agent);
      all.push(...first.events);
      const interrupt = ofType(first.events, "RUN_FINISHED")[0].outcome.interrupts[0];
      assert.equal(interrupt.toolCallId, callId);
      const resume = buildResumeArray(agent.pendingInterrupts, {
        [interrupt.id]: { status: "resolved", payload: decision.payload },
      });
      const second = await run(agent, { resume });
      all.push(...second.events);
      const result = decided(second.events, callId, decision);

      await twoMoreMessages(agent, decision, all);
      if (decision.waitForTtl) assert.ok(Date.parse(interrupt.expiresAt) < Date.now(), "the approval has expired");
      const replayed = await run(agent, { resume });
      all.push(...replayed.events);
      later(replayed.events, "Nothing more to do.");
      assert.deepEqual(ofType(replayed.events, "RUN_FINISHED")[0].outcome, { type: "success" });

      assert.deepEqual(ofType(all, "TOOL_CALL_RESULT").map((e) => e.toolCallId), [callId], "one result, in run 2");
      assert.equal(env.fake.requests(key).length, 5);
      assertOneResultUpstream(key, callId, 1, result);
    });
  }
});

describe(`${v0059.name}: exactly once`, () => {
  for (const decision of DECISIONS) {
    test(`[${v0059.version}] the ${decision.name} call gets one result over two later messages${decision.waitForTtl ? " (after the TTL)" : ""} and a repeated answer`, { timeout: TIMEOUT }, async () => {
      const key = `approval-once-${decision.name}-${v0059.tag}`;
      const callId = `call_once_${decision.name}_${v0059.tag}`;
      scriptFiveTurns(key, callId);
      const agent = newAgent(v0059, `${env.server.url}/approvals_short_ttl`, { prompt: `${key}: cancel my Netflix` });
      const all = [];

      const first = await run(agent);
      all.push(...first.events);
      const approval = ofType(first.events, "TOOL_CALL_START").find((e) => e.toolCallName === "request_approval");
      assert.ok(approval, types(first.events).join(", "));
      const answer = () => ({
        id: userMessage("").id.replace("user", "approval-answer"),
        role: "tool",
        toolCallId: approval.toolCallId,
        content: JSON.stringify(decision.payload),
      });
      agent.addMessage(answer());
      const second = await run(agent);
      all.push(...second.events);
      const result = decided(second.events, callId, decision);

      await twoMoreMessages(agent, decision, all);
      agent.addMessage(answer());
      const replayed = await run(agent);
      all.push(...replayed.events);
      later(replayed.events, "Nothing more to do.");

      assert.deepEqual(ofType(all, "TOOL_CALL_RESULT").map((e) => e.toolCallId), [callId], "one result, in run 2");
      assert.equal(env.fake.requests(key).length, 5);
      assertOneResultUpstream(key, callId, 1, result);
    });
  }
});

// ---- A rejected prediction is restored once --------------------------------------------------
//
// The prediction streams into agent.state, the person rejects it, the state from before comes
// back; then the user edits the state, sends two more messages and the answer again: the edit
// survives every later run (no old restore is applied again).

for (const client of CLIENTS) {
  describe(`${client.name}: confirmation of predicted state`, () => {
    test(`[${client.version}] a rejected prediction is restored once and later edits survive`, { timeout: TIMEOUT }, async () => {
      const key = `confirm-once-${client.tag}`;
      const callId = `call_confirm_${client.tag}`;
      const before = { theme: "dark", recipe: { title: `Old ${client.tag}` } };
      env.fake.script(
        key,
        toolTurn([{ id: callId, name: "update_recipe", arguments: { recipe: { title: `New ${client.tag}` } } }]),
        textTurn("Kept the old one."),
        textTurn("Hello."),
        textTurn("Goodbye."),
        textTurn("Nothing more to do."),
      );
      const agent = newAgent(client, `${env.server.url}/writer_confirm`, { prompt: `${key}: rewrite it`, state: before });
      const all = [];

      const first = await run(agent);
      all.push(...first.events);
      assert.equal(agent.state.recipe.title, `New ${client.tag}`, "the prediction streamed");
      let resume;
      let answer;
      if (client.protocol10) {
        const interrupt = ofType(first.events, "RUN_FINISHED")[0].outcome.interrupts[0];
        assert.equal(interrupt.toolCallId, callId);
        resume = buildResumeArray(agent.pendingInterrupts, {
          [interrupt.id]: { status: "resolved", payload: { approved: false } },
        });
      } else {
        const confirm = ofType(first.events, "TOOL_CALL_START").find((e) => e.toolCallName === "confirm_changes");
        assert.ok(confirm, types(first.events).join(", "));
        answer = () => ({
          id: userMessage("").id.replace("user", "confirm-answer"),
          role: "tool",
          toolCallId: confirm.toolCallId,
          content: JSON.stringify({ accepted: false }),
        });
        agent.addMessage(answer());
      }
      const second = await run(agent, resume ? { resume } : {});
      all.push(...second.events);
      assertLifecycle(second.events);
      assert.deepEqual(agent.state, before, "restored");

      const edited = { theme: "light", recipe: { title: `Mine ${client.tag}` } };
      agent.setState(edited);
      for (const [message, reply] of [["thanks, now just say hello", "Hello."], ["and goodbye", "Goodbye."]]) {
        agent.addMessage(userMessage(message));
        const next = await run(agent);
        all.push(...next.events);
        later(next.events, reply);
        assert.deepEqual(agent.state, edited, "the edit survives");
      }
      if (answer) agent.addMessage(answer());
      const replayed = await run(agent, resume ? { resume } : {});
      all.push(...replayed.events);
      later(replayed.events, "Nothing more to do.");
      assert.deepEqual(agent.state, edited, "the edit survives a replayed answer");

      const results = ofType(all, "TOOL_CALL_RESULT");
      assert.deepEqual(results.map((e) => e.toolCallId), [callId], "one result, in run 2");
      assert.notEqual(results[0].content, "Recipe saved.", "the rejected tool never ran");
    });
  });
}

test("no model request went unscripted", () => {
  assert.deepEqual(env.fake.unmatched, []);
});

test("the server logged no error and no panic", () => {
  assert.deepEqual(serverErrors(env.server.log()), []);
});
