// Subagents with the real clients: a planner delegates to its flights agent, which calls a
// server tool of its own. The 1.0 client runs its subagent rules (verifyEvents) over the
// attributed stream and keeps the child's messages with their subagentRunId, and its next run,
// carrying them, is accepted and answered; the 0.0.59 client gets the child inline, as an
// activity, with no subagent events. A child's state tool writes its key of the client's state
// (attributed for 1.0, as deltas both clients apply), which the next run gives back to it.
//
// An approval inside a child, on two replicas sharing Redis and their approval key: replica A
// runs the planner, whose hotels agent asks before it books; the client answers on replica B,
// where the child resumes and books; the answer replayed on A books nothing more.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { textTurn, toolTurn } from "./fake-openai.mjs";
import {
  CLIENTS,
  newAgent,
  ofType,
  run,
  startRedis,
  startServer,
  userMessage,
  withFakeUpstreamAndServer,
} from "./harness.mjs";

const TIMEOUT = 30_000;

const env = withFakeUpstreamAndServer();

for (const client of CLIENTS) {
  describe(client.name, () => {
    test(`[${client.version}] a child's work streams as the client expects, and the next run goes on`, { timeout: TIMEOUT }, async () => {
      const key = `subagents-${client.tag}`;
      const childKey = `flights-task-${client.tag}`;
      const task = `${childKey}: a flight to Rome`;
      env.fake.script(
        key,
        toolTurn([{ id: "call_1", name: "flights", arguments: { task } }]),
        textTurn("Take ", "AF12."),
        textTurn("You are welcome."),
      );
      // The child's model names its call like the parent's.
      env.fake.script(
        childKey,
        toolTurn([{ id: "call_1", name: "search_flights", arguments: {} }]),
        textTurn("AF12 ", "at 9:00."),
      );
      const agent = newAgent(client, `${env.server.url}/planner`, { prompt: `${key}: to Rome` });

      const { events } = await run(agent);

      const result = agent.messages.find((m) => m.role === "tool" && m.toolCallId === "call_1");
      assert.equal(result.content, "AF12 at 9:00.", JSON.stringify(agent.messages, null, 1));
      if (client.protocol10) {
        const [started] = ofType(events, "SUBAGENT_STARTED");
        assert.equal(started.name, "flights");
        assert.equal(started.parentToolCallId, "call_1");
        assert.equal(ofType(events, "SUBAGENT_FINISHED").length, 1);
        const childMessages = agent.messages.filter((m) => m.subagentRunId === started.subagentRunId);
        assert.ok(childMessages.length >= 3, JSON.stringify(agent.messages, null, 1));
        assert.ok(childMessages.every((m) => m.subagentRunId === started.subagentRunId));
      } else {
        assert.equal(events.filter((e) => e.type.startsWith("SUBAGENT_")).length, 0);
        assert.ok(events.every((e) => !("subagentRunId" in e)));
        const activity = ofType(events, "ACTIVITY_SNAPSHOT").at(-1);
        assert.equal(activity.activityType, "agui-host.subagent");
        assert.equal(activity.content.status, "finished");
        assert.equal(activity.content.text, "AF12 at 9:00.");
      }

      // The next run carries everything the client holds.
      agent.addMessage(userMessage("Thanks"));
      await run(agent);
      assert.equal(agent.messages.at(-1).content, "You are welcome.");
      const last = env.fake.requests(key).at(-1);
      const roles = last.messages.filter((m) => m.role !== "system").map((m) => m.role);
      assert.deepEqual(roles, ["user", "assistant", "tool", "assistant", "user"], JSON.stringify(last.messages, null, 1));
      assert.equal(env.fake.requests(childKey).length, 2);
    });

    test(`[${client.version}] a child's state lands under its key of the client's state, and comes back to it`, { timeout: TIMEOUT }, async () => {
      const key = `subagent-state-${client.tag}`;
      const childKey = `flights-plan-${client.tag}`;
      env.fake.script(
        key,
        toolTurn([{ id: "call_1", name: "flights", arguments: { task: `${childKey}: plan Rome` } }]),
        textTurn("Planned."),
        toolTurn([{ id: "call_2", name: "flights", arguments: { task: `${childKey}: check the plan` } }]),
        textTurn("Still good."),
      );
      env.fake.script(
        childKey,
        toolTurn([{ id: "call_1", name: "save_plan", arguments: { plan: "AF12 at 9:00" } }]),
        textTurn("Saved."),
        textTurn("It holds."),
      );
      const agent = newAgent(client, `${env.server.url}/planner`, { prompt: `${key}: to Rome`, state: { keep: 1 } });

      const { events } = await run(agent);

      assert.deepEqual(agent.state, { keep: 1, flights: { plan: "AF12 at 9:00" } });
      const deltas = ofType(events, "STATE_DELTA");
      assert.ok(deltas.length > 0);
      if (client.protocol10) {
        const [started] = ofType(events, "SUBAGENT_STARTED");
        assert.ok(deltas.every((e) => e.subagentRunId === started.subagentRunId));
      } else {
        assert.ok(events.every((e) => !("subagentRunId" in e)));
      }

      // The next run sends the state back; the child starts from its key.
      agent.addMessage(userMessage("Check it"));
      await run(agent);
      const child = env.fake.requests(childKey).at(-1);
      assert.match(child.messages[0].content, /AF12 at 9:00/);
      assert.deepEqual(agent.state, { keep: 1, flights: { plan: "AF12 at 9:00" } });
    });
  });
}

const SHOW_MAP = {
  name: "show_map",
  description: "Shows a city on the page's map.",
  parameters: { type: "object", properties: { city: { type: "string" } } },
};

test("[1.0.0] a child calls the page's tool; the page's result resumes the child on the next run", { timeout: TIMEOUT }, async () => {
  const client = CLIENTS.find((c) => c.protocol10);
  const key = "subagent-client-tool";
  const childKey = "flights-map-task";
  env.fake.script(
    key,
    toolTurn([{ id: "call_1", name: "flights", arguments: { task: `${childKey}: show Rome` } }]),
    textTurn("There ", "it is."),
  );
  env.fake.script(
    childKey,
    toolTurn([{ id: "call_1", name: "show_map", arguments: { city: "Rome" } }]),
    textTurn("Rome is ", "on the map."),
  );
  const agent = newAgent(client, `${env.server.url}/planner`, { prompt: `${key}: where is Rome?` });

  // Run 1: the child's call is the page's to run, attributed to the child.
  const first = await run(agent, { tools: [SHOW_MAP] });
  const [started] = ofType(first.events, "SUBAGENT_STARTED");
  const callId = `${started.subagentRunId}.call_1`;
  const finished = ofType(first.events, "RUN_FINISHED")[0];
  assert.deepEqual(finished.pendingToolCallIds ?? finished.outcome?.pendingToolCallIds, [callId], JSON.stringify(finished));
  const call = agent.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.id === callId);
  assert.ok(call, JSON.stringify(agent.messages, null, 1));
  assert.equal(call.function.name, "show_map");
  assert.deepEqual(ofType(first.events, "SUBAGENT_FINISHED")[0].outcome, { type: "suspended" });

  // Run 2: the page ran it; the child goes on, then the parent.
  agent.addMessage({ id: "map-result", role: "tool", toolCallId: callId, content: "The map shows Rome." });
  const second = await run(agent, { tools: [SHOW_MAP] });
  assert.equal(ofType(second.events, "SUBAGENT_STARTED")[0].subagentRunId, started.subagentRunId);
  const result = agent.messages.find((m) => m.role === "tool" && m.toolCallId === "call_1");
  assert.equal(result?.content, "Rome is on the map.", JSON.stringify(agent.messages, null, 1));
  assert.equal(agent.messages.at(-1).content, "There it is.");
  const childRequests = env.fake.requests(childKey);
  assert.equal(childRequests.length, 2);
  assert.deepEqual(childRequests[1].messages.filter((m) => m.role !== "system").map((m) => m.role), ["user", "assistant", "tool"]);
});

const replicas = {};
before(async () => {
  replicas.redis = await startRedis();
  const extraEnv = {
    APP_THREADS__STORE: "redis",
    APP_THREADS__REDIS_URL: replicas.redis.url,
    APP_SECURITY__APPROVAL_KEYS: "an-approval-key-both-replicas-share-of-40-chars",
  };
  replicas.a = await startServer({ upstream: env.fake.baseUrl, extraEnv });
  replicas.b = await startServer({ upstream: env.fake.baseUrl, extraEnv });
});
after(async () => {
  await replicas.a?.stop();
  await replicas.b?.stop();
  await replicas.redis?.stop();
});

/** The child's model requests that carry the booking's result: one per booking it was told of. */
function bookingsSeen(requests) {
  return requests.filter((r) => r.messages.some((m) => m.role === "tool" && String(m.content).includes("HX-1"))).length;
}

for (const client of CLIENTS) {
  describe(`${client.name} on two replicas`, () => {
    test(`[${client.version}] a child's approval, answered on another replica over Redis, resumes the child once`, { timeout: TIMEOUT }, async () => {
      const key = `subagent-approval-${client.tag}`;
      const childKey = `hotels-task-${client.tag}`;
      env.fake.script(
        key,
        toolTurn([{ id: "call_1", name: "hotels", arguments: { task: `${childKey}: the Grand in Rome` } }]),
        textTurn("Your room ", "is booked."),
        textTurn("Nothing more to do."),
      );
      env.fake.script(
        childKey,
        toolTurn([{ id: "call_1", name: "book_hotel", arguments: { hotel: "Grand" } }]),
        textTurn("Booked: ", "HX-1."),
      );
      const agent = newAgent(client, `${replicas.a.url}/planner`, { prompt: `${key}: a hotel in Rome` });
      const log = () => `A:\n${replicas.a.log().slice(-3000)}\nB:\n${replicas.b.log().slice(-3000)}`;

      // Run 1 on A: the child asks.
      const first = await run(agent);
      let answer;
      if (client.protocol10) {
        const [started] = ofType(first.events, "SUBAGENT_STARTED");
        assert.equal(started.name, "hotels");
        const finished = ofType(first.events, "RUN_FINISHED")[0];
        assert.equal(finished.outcome?.type, "interrupt", JSON.stringify(finished));
        const [interrupt] = finished.outcome.interrupts;
        assert.equal(interrupt.subagentRunId, started.subagentRunId);
        assert.equal(interrupt.toolCallId, `${started.subagentRunId}.call_1`);
        assert.equal(interrupt.reason, "tool_call");
        const [suspended] = ofType(first.events, "SUBAGENT_FINISHED");
        assert.deepEqual(suspended.outcome, { type: "suspended", interruptIds: [interrupt.id] });
        assert.deepEqual(agent.pendingInterrupts, [interrupt]);
        answer = { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }] };
      } else {
        assert.equal(first.events.filter((e) => e.type.startsWith("SUBAGENT_")).length, 0);
        const approval = agent.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.function.name === "request_approval");
        assert.ok(approval, JSON.stringify(agent.messages, null, 1));
        const question = JSON.parse(approval.function.arguments);
        assert.equal(question.toolCallId, "call_1");
        assert.equal(question.toolName, "book_hotel");
        assert.equal(question.agent, "hotels");
        agent.addMessage({ id: `answer-${client.tag}`, role: "tool", toolCallId: approval.id, content: JSON.stringify({ approved: true }) });
        answer = {};
      }
      assert.equal(bookingsSeen(env.fake.requests(childKey)), 0, "nothing booked before the answer");

      // Run 2 on B: the child resumes (the same subagent run) and books.
      agent.url = `${replicas.b.url}/planner`;
      const second = await run(agent, answer);
      const result = agent.messages.find((m) => m.role === "tool" && m.toolCallId === "call_1");
      assert.equal(result?.content, "Booked: HX-1.", `${JSON.stringify(agent.messages, null, 1)}\n${log()}`);
      if (client.protocol10) {
        assert.equal(ofType(second.events, "SUBAGENT_STARTED")[0].subagentRunId, ofType(first.events, "SUBAGENT_STARTED")[0].subagentRunId);
        assert.deepEqual(agent.pendingInterrupts, []);
      }
      assert.equal(agent.messages.at(-1).content, "Your room is booked.");
      assert.equal(bookingsSeen(env.fake.requests(childKey)), 1);

      // Run 3 on A: the user goes on; nothing is booked again.
      agent.url = `${replicas.a.url}/planner`;
      agent.addMessage(userMessage("Thanks"));
      await run(agent);
      assert.equal(agent.messages.at(-1).content, "Nothing more to do.");
      assert.equal(bookingsSeen(env.fake.requests(childKey)), 1, "booked once");
    });
  });
}
