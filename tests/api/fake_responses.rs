//! OpenAI Responses streams for the fake upstream (served on `POST /v1/responses`), shaped as
//! the real API streams them: every frame names its event and carries a `sequence_number`;
//! `response.created` and `.in_progress` open, each output item is added, streams its deltas
//! (text, argument fragments, reasoning summary text) and is done (a reasoning item with its
//! encrypted content), and `response.completed` carries the usage.

use serde_json::{json, Value};

use crate::fake_llm::chunks::{split, Call};

/// The model named in the replies.
pub(crate) const MODEL: &str = "o4-mini";

/// The frames of one reply, numbered as the API numbers them.
#[derive(Debug, Default)]
pub(crate) struct Script {
    frames: Vec<String>,
    outputs: usize,
}

impl Script {
    /// `response.created` and `response.in_progress`.
    pub(crate) fn new() -> Self {
        let mut script = Script::default();
        let response = json!({"id": "resp_01", "object": "response", "status": "in_progress",
                              "model": MODEL, "output": []});
        script.push(json!({"type": "response.created", "response": response}));
        script.push(json!({"type": "response.in_progress", "response": response}));
        script
    }

    fn push(&mut self, mut data: Value) {
        data["sequence_number"] = json!(self.frames.len());
        let event = data["type"].as_str().expect("a type").to_owned();
        self.frames.push(format!("event: {event}\ndata: {data}"));
    }

    fn next_output(&mut self) -> usize {
        self.outputs += 1;
        self.outputs - 1
    }

    /// A reasoning item: its summary parts, then done with `encrypted` content.
    pub(crate) fn reasoning(mut self, id: &str, summary: &[&str], encrypted: &str) -> Self {
        let at = self.next_output();
        self.push(
            json!({"type": "response.output_item.added", "output_index": at,
            "item": {"type": "reasoning", "id": id, "summary": []}}),
        );
        for (part, text) in summary.iter().enumerate() {
            self.push(json!({"type": "response.reasoning_summary_part.added", "item_id": id,
                "output_index": at, "summary_index": part, "part": {"type": "summary_text", "text": ""}}));
            self.push(
                json!({"type": "response.reasoning_summary_text.delta", "item_id": id,
                "output_index": at, "summary_index": part, "delta": text}),
            );
            self.push(
                json!({"type": "response.reasoning_summary_text.done", "item_id": id,
                "output_index": at, "summary_index": part, "text": text}),
            );
        }
        let summary: Vec<Value> = summary
            .iter()
            .map(|t| json!({"type": "summary_text", "text": t}))
            .collect();
        self.push(json!({"type": "response.output_item.done", "output_index": at,
            "item": {"type": "reasoning", "id": id, "summary": summary, "encrypted_content": encrypted}}));
        self
    }

    /// An assistant message, one text delta per part.
    pub(crate) fn text(mut self, parts: &[&str]) -> Self {
        let at = self.next_output();
        let id = format!("msg_{at}");
        self.push(json!({"type": "response.output_item.added", "output_index": at,
            "item": {"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []}}));
        self.push(
            json!({"type": "response.content_part.added", "item_id": id, "output_index": at,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        for part in parts {
            self.push(
                json!({"type": "response.output_text.delta", "item_id": id, "output_index": at,
                "content_index": 0, "delta": part}),
            );
        }
        let text: String = parts.concat();
        self.push(
            json!({"type": "response.output_text.done", "item_id": id, "output_index": at,
            "content_index": 0, "text": text}),
        );
        self.push(
            json!({"type": "response.output_item.done", "output_index": at,
            "item": {"type": "message", "id": id, "role": "assistant", "status": "completed",
                     "content": [{"type": "output_text", "text": text, "annotations": []}]}}),
        );
        self
    }

    /// A function call: added, its arguments in fragments of 1 to 8 characters (the same as
    /// `chunks::tool_call_deltas`), done.
    pub(crate) fn call(mut self, (call_id, name, arguments): Call<'_>) -> Self {
        let at = self.next_output();
        let id = format!("fc_{at}");
        self.push(
            json!({"type": "response.output_item.added", "output_index": at,
            "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name,
                     "arguments": "", "status": "in_progress"}}),
        );
        for fragment in split(arguments, call_id) {
            self.push(
                json!({"type": "response.function_call_arguments.delta", "item_id": id,
                "output_index": at, "delta": fragment}),
            );
        }
        self.push(
            json!({"type": "response.function_call_arguments.done", "item_id": id,
            "output_index": at, "arguments": arguments}),
        );
        self.push(
            json!({"type": "response.output_item.done", "output_index": at,
            "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name,
                     "arguments": arguments, "status": "completed"}}),
        );
        self
    }

    /// `response.completed` with the usage.
    pub(crate) fn completed(mut self, input_tokens: u64, output_tokens: u64) -> Vec<String> {
        self.push(json!({"type": "response.completed", "response": {
            "id": "resp_01", "object": "response", "status": "completed", "model": MODEL,
            "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": input_tokens + output_tokens}}}));
        self.frames
    }

    /// The frames so far, then an `error` event, as the API sends one mid-stream.
    pub(crate) fn error(mut self, code: &str, message: &str) -> Vec<String> {
        self.push(json!({"type": "error", "code": code, "message": message, "param": null}));
        self.frames
    }

    /// The frames so far, then `response.failed`.
    pub(crate) fn failed(mut self, code: &str, message: &str) -> Vec<String> {
        self.push(
            json!({"type": "response.failed", "response": {"id": "resp_01", "status": "failed",
            "error": {"code": code, "message": message}}}),
        );
        self.frames
    }

    /// The frames so far, with no terminal event.
    pub(crate) fn unfinished(self) -> Vec<String> {
        self.frames
    }
}

/// A whole text answer.
pub(crate) fn text_reply(parts: &[&str]) -> Vec<String> {
    Script::new().text(parts).completed(12, 5)
}

/// Tool calls (parallel when several).
pub(crate) fn tool_calls(calls: &[Call<'_>]) -> Vec<String> {
    calls
        .iter()
        .fold(Script::new(), |script, call| script.call(*call))
        .completed(12, 20)
}
