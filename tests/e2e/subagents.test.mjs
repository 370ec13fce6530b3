// Subagents with the real clients: a planner delegates to its flights agent, which calls a
// server tool of its own. The 1.0 client runs its subagent rules (verifyEvents) over the
// attributed stream and keeps the child's messages with their subagentRunId, and its next run,
// carrying them, is accepted and answered; the 0.0.59 client gets the child inline, as an
// activity, with no subagent events.

import { describe, test } from "node:test";
import assert from "node:assert/strict";

import { textTurn, toolTurn } from "./fake-openai.mjs";
import { CLIENTS, newAgent, ofType, run, userMessage, withFakeUpstreamAndServer } from "./harness.mjs";

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
  });
}
