//! Checking the media parts of a request: what an image upload adds to decoding a run's body,
//! before any byte of the stream.
//!
//! `cargo bench --bench input` decodes a `RunAgentInput` whose user message carries a 3 MiB
//! PNG as inline base64 (a phone photo; about 4 MiB of JSON, the default body limit), with and
//! without the media check (strict base64 over the whole payload, the PNG signature, the MIME
//! type), and the check alone. The ratio of the first two is the check's share of the request.

use std::hint::black_box;

use base64::Engine as _;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use agui_host::protocol::check_media;
use agui_host::protocol::RunAgentInput;
use agui_host::settings::InputLimitSettings;

/// A body with one user message: a question and a PNG of `image_bytes` bytes.
fn body_with_image(image_bytes: usize) -> Vec<u8> {
    let mut image = b"\x89PNG\r\n\x1a\n".to_vec();
    // Incompressible-looking bytes, like a real photo's compressed data.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    image.extend((8..image_bytes).map(|_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state.to_le_bytes()[0]
    }));
    let data = base64::engine::general_purpose::STANDARD.encode(&image);
    serde_json::to_vec(&serde_json::json!({
        "threadId": "t", "runId": "r", "protocolVersion": "1.0",
        "messages": [{"id": "u", "role": "user", "content": [
            {"type": "text", "text": "What do you see in this image?"},
            {"type": "image", "source": {"type": "data", "value": data, "mimeType": "image/png"}},
        ]}],
    }))
    .unwrap()
}

fn media(c: &mut Criterion) {
    let body = body_with_image(3 * 1024 * 1024);
    let limits = InputLimitSettings::default();
    let parsed: RunAgentInput = serde_json::from_slice(&body).unwrap();
    check_media(&parsed.messages, &limits).expect("the bench image is valid");

    let mut group = c.benchmark_group("request_with_3mib_image");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("parse", |b| {
        b.iter(|| black_box(serde_json::from_slice::<RunAgentInput>(black_box(&body)).unwrap()))
    });
    group.bench_function("parse_and_check_media", |b| {
        b.iter(|| {
            let input: RunAgentInput = serde_json::from_slice(black_box(&body)).unwrap();
            check_media(&input.messages, &limits).unwrap();
            black_box(input)
        })
    });
    group.bench_function("check_media_only", |b| {
        b.iter(|| check_media(black_box(&parsed.messages), &limits).unwrap())
    });
    group.finish();
}

criterion_group!(benches, media);
criterion_main!(benches);
