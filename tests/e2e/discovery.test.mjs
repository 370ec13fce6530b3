// Discovery: GET /agents, then each agent's GET /<agent>/capabilities parsed with the real
// @ag-ui/core 1.0.0 AgentCapabilitiesSchema. The schema is loose (it lets unknown keys through),
// so every key is also checked against the schema's own field lists: a misspelt category or
// flag fails here instead of being silently ignored by clients. Then a real client runs the
// agent at the route the listing gave.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";

import { AgentCapabilitiesSchema, ToolSchema } from "agui-core-1/schemas";

import { CLIENTS, newAgent, run, startServer, types } from "./harness.mjs";

const TIMEOUT = 30_000;
let server;

before(async () => {
  // The offline model: discovery needs no upstream, and the follow-up run needs one that answers.
  server = await startServer({});
});

after(async () => {
  await server?.stop();
});

async function getJson(path) {
  const res = await fetch(`${server.url}${path}`);
  assert.equal(res.status, 200, `${path}: ${await res.clone().text()}`);
  assert.match(res.headers.get("content-type"), /^application\/json/);
  return res.json();
}

/** Keys of an object schema, looking through `.optional()`. */
function fieldsOf(schema) {
  const inner = typeof schema.unwrap === "function" ? schema.unwrap() : schema;
  return Object.keys(inner.shape);
}

/** Every key of the capabilities, and of each category, is one the schema names. */
function assertOnlyDeclaredKeys(capabilities, where) {
  const categories = AgentCapabilitiesSchema.shape;
  for (const [category, value] of Object.entries(capabilities)) {
    assert.ok(category in categories, `${where}: unknown category ${category}`);
    if (category === "custom") continue; // open by key, by definition
    const allowed = fieldsOf(categories[category]);
    for (const key of Object.keys(value)) {
      assert.ok(allowed.includes(key), `${where}: ${category}.${key} is not in the schema (${allowed})`);
    }
  }
  const multimodalInput = capabilities.multimodal?.input;
  if (multimodalInput) {
    const allowed = fieldsOf(categories.multimodal.unwrap().shape.input);
    for (const key of Object.keys(multimodalInput)) {
      assert.ok(allowed.includes(key), `${where}: multimodal.input.${key} is not in the schema`);
    }
  }
}

test("every listed agent's capabilities parse with @ag-ui/core 1.0.0's AgentCapabilitiesSchema", async () => {
  const listing = await getJson("/agents");
  assert.equal(listing.defaultAgent, "e2e");
  const names = listing.agents.map((a) => a.name);
  for (const expected of ["e2e", "recipe", "writer", "approvals"]) {
    assert.ok(names.includes(expected), `${expected} in ${names}`);
  }
  for (const agent of listing.agents) {
    assert.equal(agent.route, `/${agent.name}`);
    const capabilities = await getJson(agent.capabilities);
    const parsed = AgentCapabilitiesSchema.safeParse(capabilities);
    assert.ok(parsed.success, `${agent.name}: ${JSON.stringify(parsed.error?.issues)}`);
    assertOnlyDeclaredKeys(capabilities, agent.name);
    for (const tool of capabilities.tools.items) {
      assert.ok(ToolSchema.safeParse(tool).success, `${agent.name}: tool ${tool.name}`);
    }
    assert.equal(capabilities.transport.streaming, true);
    // The e2e server keeps the default memory store, so runs can be resumed.
    assert.equal(capabilities.transport.resumable, true);
    assert.equal(capabilities.identity.name, agent.name);
  }
});

test("capabilities follow the configuration of tests/e2e/agents.toml", async () => {
  const e2e = await getJson("/e2e/capabilities");
  assert.deepEqual(e2e.tools.items.map((t) => t.name), ["get_weather"]);
  assert.deepEqual(e2e.tools.items[0].parameters.required, ["location"]);
  assert.equal(e2e.humanInTheLoop.approvals, false);

  const approvals = await getJson("/approvals/capabilities");
  assert.equal(approvals.humanInTheLoop.approvals, true);
  assert.equal(approvals.humanInTheLoop.interrupts, true);

  const writer = await getJson("/writer/capabilities");
  assert.equal(writer.state.deltas, true);
  assert.ok(writer.custom["agui-host"].predictState, JSON.stringify(writer.custom));
});

for (const client of CLIENTS) {
  describe(`discovery then a run with ${client.name}`, () => {
    test(`[${client.version}] the route /agents gives runs the agent`, { timeout: TIMEOUT }, async () => {
      const listing = await getJson("/agents");
      const listed = listing.agents.find((a) => a.default);
      const agent = newAgent(client, `${server.url}${listed.route}`, { prompt: "Hi there!" });

      const { events } = await run(agent);

      assert.equal(types(events).at(-1), "RUN_FINISHED");
    });
  });
}
