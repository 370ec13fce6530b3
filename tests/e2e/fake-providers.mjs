// Turns of the fake upstream in the two other dialects agui-host speaks, streamed the way the
// real APIs stream them, every frame naming its event (`{event, data}`, which fake-openai.mjs
// writes as `event:` and `data:` lines):
//   messagesTurn:  Anthropic Messages: message_start, ping, content blocks (thinking with its
//                  signature, text, tool_use with input_json_delta fragments), message_delta
//                  with the stop reason, message_stop;
//   responsesTurn: OpenAI Responses: response.created, output items (reasoning with summary
//                  deltas and encrypted content, a message with text deltas, function calls
//                  with argument deltas), response.completed with the usage.

import { split } from "./fake-openai.mjs";

const argsOf = (call) => (typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments));

export function messagesTurn({ thinking, signature = "sig-e2e", text = [], calls = [], fragment = 3 } = {}) {
  const frames = [];
  const push = (data) => frames.push({ event: data.type, data });
  push({
    type: "message_start",
    message: { id: "msg_e2e", type: "message", role: "assistant", model: "claude-e2e", content: [],
      usage: { input_tokens: 11, output_tokens: 1 } },
  });
  push({ type: "ping" });
  let index = 0;
  if (thinking !== undefined) {
    push({ type: "content_block_start", index, content_block: { type: "thinking", thinking: "", signature: "" } });
    for (const part of split(thinking, 8)) {
      push({ type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: part } });
    }
    push({ type: "content_block_delta", index, delta: { type: "signature_delta", signature } });
    push({ type: "content_block_stop", index });
    index += 1;
  }
  if (text.length > 0) {
    push({ type: "content_block_start", index, content_block: { type: "text", text: "" } });
    for (const part of text) push({ type: "content_block_delta", index, delta: { type: "text_delta", text: part } });
    push({ type: "content_block_stop", index });
    index += 1;
  }
  for (const call of calls) {
    push({ type: "content_block_start", index, content_block: { type: "tool_use", id: call.id, name: call.name, input: {} } });
    for (const piece of split(argsOf(call), fragment)) {
      push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: piece } });
    }
    push({ type: "content_block_stop", index });
    index += 1;
  }
  push({
    type: "message_delta",
    delta: { stop_reason: calls.length > 0 ? "tool_use" : "end_turn", stop_sequence: null },
    usage: { output_tokens: 7 },
  });
  push({ type: "message_stop" });
  return { frames };
}

export function responsesTurn({ summary = [], encrypted = "enc-e2e", text = [], calls = [], fragment = 3 } = {}) {
  const frames = [];
  const push = (data) => frames.push({ event: data.type, data: { ...data, sequence_number: frames.length } });
  push({ type: "response.created", response: { id: "resp_e2e", status: "in_progress", output: [] } });
  let at = 0;
  if (summary.length > 0) {
    const id = "rs_e2e";
    push({ type: "response.output_item.added", output_index: at, item: { type: "reasoning", id, summary: [] } });
    summary.forEach((part, summary_index) => {
      push({ type: "response.reasoning_summary_text.delta", item_id: id, output_index: at, summary_index, delta: part });
    });
    push({
      type: "response.output_item.done",
      output_index: at,
      item: { type: "reasoning", id, summary: summary.map((t) => ({ type: "summary_text", text: t })), encrypted_content: encrypted },
    });
    at += 1;
  }
  if (text.length > 0) {
    const id = `msg_${at}`;
    push({ type: "response.output_item.added", output_index: at, item: { type: "message", id, role: "assistant", content: [] } });
    for (const part of text) {
      push({ type: "response.output_text.delta", item_id: id, output_index: at, content_index: 0, delta: part });
    }
    push({ type: "response.output_item.done", output_index: at, item: { type: "message", id, role: "assistant" } });
    at += 1;
  }
  for (const call of calls) {
    const id = `fc_${at}`;
    push({
      type: "response.output_item.added",
      output_index: at,
      item: { type: "function_call", id, call_id: call.id, name: call.name, arguments: "" },
    });
    for (const piece of split(argsOf(call), fragment)) {
      push({ type: "response.function_call_arguments.delta", item_id: id, output_index: at, delta: piece });
    }
    push({ type: "response.function_call_arguments.done", item_id: id, output_index: at, arguments: argsOf(call) });
    at += 1;
  }
  push({
    type: "response.completed",
    response: { id: "resp_e2e", status: "completed", usage: { input_tokens: 11, output_tokens: 7 } },
  });
  return { frames };
}
