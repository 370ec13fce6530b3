//! Media parts (images, audio, video, documents) are untrusted input that reaches the model
//! verbatim: inline data becomes a `data:` URL in the upstream request and a URL is fetched by
//! the model server. This module checks every media part before the stream starts, so a bad one
//! is a 422 naming the message and part, not a model error after the run began: the count per
//! request, the MIME type's syntax (it is spliced into a `data:` URL), strict base64 within the
//! size limit, image bytes that are what their type says (PNG, JPEG, GIF or WebP, the formats
//! OpenAI-compatible vision endpoints take), and URLs that are absolute `http(s)` (or `data:`)
//! and short, when the operator allows URLs at all.

use base64::Engine as _;

use super::limits::{InputCode, InputLimits, InputRefusal};
use super::{Content, ContentPart, Message, PartSource};

/// Longest URL (or file handle) a media part may name. Browsers and CDNs cap URLs near here.
pub(super) const MAX_URL_BYTES: usize = 8 * 1024;

/// Longest MIME type accepted (RFC 6838: 127 characters for each of type and subtype).
const MAX_MIME_BYTES: usize = 255;

/// The image formats forwarded to the model, with the bytes each starts with.
const IMAGE_FORMATS: &[(&str, &str)] = &[
    ("image/png", "PNG"),
    ("image/jpeg", "JPEG"),
    ("image/jpg", "JPEG"),
    ("image/gif", "GIF"),
    ("image/webp", "WebP"),
];

/// What one part's check found wrong: the error code and the reason.
type Refusal = (InputCode, String);

/// Checks every media part of `messages` against `limits` (see the module docs); the error is
/// refusal names the message and part. Public so that its cost can be benchmarked (`benches/input.rs`)
/// and an embedder decoding input itself can apply the same checks.
pub fn check_media(messages: &[Message], limits: &InputLimits) -> Result<(), InputRefusal> {
    let mut count = 0usize;
    for (message_index, message) in messages.iter().enumerate() {
        let content = match message {
            Message::User(m) => &m.content,
            Message::Tool(m) => &m.content,
            _ => continue,
        };
        let Content::Parts(parts) = content else {
            continue;
        };
        for (part_index, part) in parts.iter().enumerate() {
            if matches!(part, ContentPart::Text { .. } | ContentPart::Unknown) {
                continue;
            }
            count += 1;
            if count > limits.max_media_parts {
                return Err(InputRefusal::new(
                    InputCode::TooManyMediaParts,
                    format!(
                        "the request has more than {} media parts, this server's limit \
                         (server.input_limits.max_media_parts)",
                        limits.max_media_parts
                    ),
                ));
            }
            check_part(part, limits).map_err(|(code, reason)| {
                InputRefusal::new(
                    code,
                    format!("messages[{message_index}].content[{part_index}]: {reason}"),
                )
            })?;
        }
    }
    Ok(())
}

fn check_part(part: &ContentPart, limits: &InputLimits) -> Result<(), Refusal> {
    match part {
        ContentPart::Image(media) => check_source(&media.source, true, limits),
        ContentPart::Audio(media) | ContentPart::Video(media) | ContentPart::Document(media) => {
            check_source(&media.source, false, limits)
        }
        ContentPart::Binary {
            mime_type,
            data,
            url,
            ..
        } => {
            let image = mime_type.starts_with("image/");
            check_mime(mime_type, image)?;
            match (data, url) {
                (Some(data), _) => check_inline(mime_type, data, image, limits),
                (None, Some(url)) => check_url(url, image, limits),
                (None, None) => Ok(()),
            }
        }
        ContentPart::Text { .. } | ContentPart::Unknown => Ok(()),
    }
}

fn check_source(source: &PartSource, image: bool, limits: &InputLimits) -> Result<(), Refusal> {
    match source {
        PartSource::Data { value, mime_type } => check_inline(mime_type, value, image, limits),
        PartSource::Url { value, mime_type } => {
            if let Some(mime_type) = mime_type {
                check_mime(mime_type, image)?;
            }
            check_url(value, image, limits)
        }
        PartSource::File {
            value, mime_type, ..
        } => {
            if let Some(mime_type) = mime_type {
                check_mime(mime_type, false)?;
            }
            if value.is_empty() || value.len() > MAX_URL_BYTES {
                return Err(invalid(format!(
                    "a file handle must have 1 to {MAX_URL_BYTES} bytes"
                )));
            }
            Ok(())
        }
    }
}

/// Base64 `data` of type `mime_type`: strict base64, within the size limit, and for an image
/// one of the forwarded formats with the bytes to match.
fn check_inline(
    mime_type: &str,
    data: &str,
    image: bool,
    limits: &InputLimits,
) -> Result<(), Refusal> {
    let format = check_mime(mime_type, image)?;
    // Three bytes per four characters, less the padding: known before decoding anything.
    let padding = data.bytes().rev().take(2).filter(|&b| b == b'=').count();
    let decoded_len = (data.len() / 4 * 3).saturating_sub(padding);
    if decoded_len > limits.max_media_bytes {
        return Err((
            InputCode::MediaTooLarge,
            format!(
                "the inline data is about {decoded_len} bytes, over this server's limit of {} \
                 (server.input_limits.max_media_bytes)",
                limits.max_media_bytes
            ),
        ));
    }
    let head = decode_head(data).ok_or_else(|| {
        invalid("the inline data is not valid base64 (standard alphabet, padded)".to_owned())
    })?;
    if head.is_empty() {
        return Err(invalid("the inline data is empty".to_owned()));
    }
    if let Some(format) = format {
        if !starts_like(format, &head) {
            return Err(invalid(format!(
                "the inline data is not a {format} image, as its mimeType {mime_type} says"
            )));
        }
    }
    Ok(())
}

/// Validates all of `data` as base64 in fixed-size pieces (no copy of the whole payload) and
/// returns its first bytes, or `None` when any piece is not strict, padded base64.
fn decode_head(data: &str) -> Option<Vec<u8>> {
    const PIECE: usize = 4 * 1024;
    let mut buffer = [0u8; PIECE / 4 * 3];
    let mut head = Vec::new();
    for piece in data.as_bytes().chunks(PIECE) {
        let written = base64::engine::general_purpose::STANDARD
            .decode_slice(piece, &mut buffer)
            .ok()?;
        if head.is_empty() {
            head.extend_from_slice(&buffer[..written.min(16)]);
        }
    }
    Some(head)
}

/// A URL source: an absolute `http(s)` URL (fetched by the model server, so only when
/// `allow_media_urls`), or a `data:` URL that holds base64 data, checked like inline data.
fn check_url(url: &str, image: bool, limits: &InputLimits) -> Result<(), Refusal> {
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((mime_type, data)) = rest
            .split_once(',')
            .and_then(|(meta, data)| Some((meta.strip_suffix(";base64")?, data)))
        else {
            return Err(invalid(
                "a data: URL must be data:<mimeType>;base64,<data>".to_owned(),
            ));
        };
        return check_inline(mime_type, data, image, limits);
    }
    if url.len() > MAX_URL_BYTES {
        return Err(invalid(format!(
            "the URL has {} bytes, over {MAX_URL_BYTES}",
            url.len()
        )));
    }
    let parsed = url::Url::parse(url).map_err(|e| invalid(format!("not a valid URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(invalid(format!(
            "a media URL must be an absolute http(s) or data: URL, not {}:",
            parsed.scheme()
        )));
    }
    if !limits.allow_media_urls {
        return Err((
            InputCode::MediaUrlNotAllowed,
            "this server accepts media only as inline data \
             (server.input_limits.allow_media_urls = false)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// A MIME type is spliced into a `data:` URL, so it must be a bare `type/subtype` (RFC 6838
/// characters, no parameters); an image must be one of the forwarded formats, which is
/// returned.
fn check_mime(mime_type: &str, image: bool) -> Result<Option<&'static str>, Refusal> {
    let restricted = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let well_formed = mime_type.len() <= MAX_MIME_BYTES
        && mime_type
            .split_once('/')
            .is_some_and(|(kind, subtype)| restricted(kind) && restricted(subtype));
    if !well_formed {
        return Err(invalid(format!(
            "mimeType {:?} is not a type/subtype",
            mime_type.chars().take(64).collect::<String>()
        )));
    }
    if !image {
        return Ok(None);
    }
    match image_format(mime_type) {
        Some(format) => Ok(Some(format)),
        None => Err((
            InputCode::UnsupportedImageType,
            format!("images must be PNG, JPEG, GIF or WebP, not {mime_type}"),
        )),
    }
}

fn image_format(mime_type: &str) -> Option<&'static str> {
    IMAGE_FORMATS
        .iter()
        .find(|(mime, _)| mime.eq_ignore_ascii_case(mime_type))
        .map(|&(_, format)| format)
}

/// Whether `head` starts with the signature of `format`.
fn starts_like(format: &str, head: &[u8]) -> bool {
    match format {
        "PNG" => head.starts_with(b"\x89PNG\r\n\x1a\n"),
        "JPEG" => head.starts_with(&[0xFF, 0xD8, 0xFF]),
        "GIF" => head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a"),
        "WebP" => head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP",
        _ => false,
    }
}

fn invalid(reason: String) -> Refusal {
    (InputCode::InvalidMedia, reason)
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::{json, Value};

    use super::*;

    /// A complete 1×1 PNG.
    pub(crate) const PNG_1X1: &str =
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";
    /// The first bytes of a JPEG, a GIF and a WebP file, and of a PDF.
    const JPEG_HEAD: &str = "/9j/4AAAAAAAAAAA";
    const GIF_HEAD: &str = "R0lGODlhAAAAAAAA";
    const WEBP_HEAD: &str = "UklGRhAAAABXRUJQVlA4IA==";
    const PDF: &str = "JVBERi0xLjcgaGVsbG8=";

    fn user_parts(parts: &Value) -> Vec<Message> {
        serde_json::from_value(json!([{"id": "u", "role": "user", "content": parts}])).unwrap()
    }

    fn image(source: &Value) -> Value {
        json!({"type": "image", "source": source})
    }

    fn data(mime_type: &str, value: &str) -> Value {
        json!({"type": "data", "mimeType": mime_type, "value": value})
    }

    fn url(value: &str) -> Value {
        json!({"type": "url", "value": value})
    }

    /// The refusal's code and message, or `None` when accepted.
    #[allow(clippy::needless_pass_by_value)] // call sites read as data: `verdict(json!(...))`
    fn verdict(parts: Value, limits: &InputLimits) -> Option<(String, String)> {
        check_media(&user_parts(&parts), limits).err().map(|error| {
            let text = format!("{error:?}");
            let code = ["too_many_media_parts", "media_too_large", "invalid_media"]
                .into_iter()
                .chain(["unsupported_image_type", "media_url_not_allowed"])
                .find(|code| text.contains(&format!("\"{code}\"")))
                .unwrap_or_else(|| panic!("a known code in {text}"))
                .to_owned();
            (code, text)
        })
    }

    #[track_caller]
    fn refused(parts: Value, code: &str) -> String {
        let (actual, message) = verdict(parts, &InputLimits::default()).expect("refused");
        assert_eq!(actual, code, "{message}");
        message
    }

    #[test]
    fn well_formed_images_and_media_are_accepted() {
        let limits = InputLimits::default();
        let parts = json!([
            {"type": "text", "text": "look"},
            image(&data("image/png", PNG_1X1)),
            image(&data("image/jpeg", JPEG_HEAD)),
            image(&data("IMAGE/GIF", GIF_HEAD)),
            image(&data("image/webp", WEBP_HEAD)),
            image(&url("https://example.com/cat.png?size=large")),
            image(&url(&format!("data:image/png;base64,{PNG_1X1}"))),
            {"type": "document", "source": data("application/pdf", PDF)},
            {"type": "audio", "source": {"type": "file", "value": "file-abc", "mimeType": "audio/wav"}},
            {"type": "binary", "mimeType": "image/png", "data": PNG_1X1},
            {"type": "binary", "mimeType": "image/png", "url": "http://example.com/a.png"},
            {"type": "binary", "mimeType": "application/pdf", "id": "upload-1"},
            {"type": "future-part", "whatever": 1},
        ]);
        assert_eq!(verdict(parts, &limits), None);
    }

    #[test]
    fn image_bytes_must_match_a_forwarded_format() {
        let message = refused(
            json!([image(&data("image/png", JPEG_HEAD))]),
            "invalid_media",
        );
        assert!(message.contains("messages[0].content[0]"), "{message}");
        assert!(message.contains("not a PNG image"), "{message}");
        refused(json!([image(&data("image/png", PDF))]), "invalid_media");
        refused(
            json!([image(&data("image/svg+xml", "PHN2Zz48L3N2Zz4="))]),
            "unsupported_image_type",
        );
        refused(
            json!([{"type": "binary", "mimeType": "image/tiff", "data": "SUkqAA=="}]),
            "unsupported_image_type",
        );
        refused(
            json!([image(&url("data:image/gif;base64,AAAAAAAA"))]),
            "invalid_media",
        );
    }

    #[test]
    fn base64_must_be_strict_and_non_empty() {
        for bad in [
            "not base64!",
            "iVBORw0KGgo",
            "iVBO Rw0K",
            "",
            "iVBORw==AAAA",
        ] {
            refused(json!([image(&data("image/png", bad))]), "invalid_media");
        }
        // A long valid prefix does not hide a bad character far into the data.
        let long = format!("{}{}!", PNG_1X1, "A".repeat(20_000));
        refused(json!([image(&data("image/png", &long))]), "invalid_media");
    }

    #[test]
    fn mime_types_cannot_break_out_of_a_data_url() {
        for bad in [
            "image/png;base64,AAAA",
            "image/png,",
            "text/html\r\n",
            "png",
            "image/",
            "/png",
        ] {
            let message = refused(
                json!([{"type": "document", "source": data(bad, PDF)}]),
                "invalid_media",
            );
            assert!(message.contains("is not a type/subtype"), "{message}");
        }
    }

    #[test]
    fn urls_must_be_absolute_http_or_data() {
        for bad in [
            "file:///etc/passwd",
            "javascript:alert(1)",
            "ftp://example.com/a.png",
            "/relative/a.png",
            "https://",
            "data:image/png,rawbytes",
        ] {
            refused(json!([image(&url(bad))]), "invalid_media");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_BYTES));
        refused(json!([image(&url(&long))]), "invalid_media");

        let inline_only = InputLimits {
            allow_media_urls: false,
            ..InputLimits::default()
        };
        let (code, _) = verdict(
            json!([image(&url("https://example.com/a.png"))]),
            &inline_only,
        )
        .expect("refused");
        assert_eq!(code, "media_url_not_allowed");
        assert_eq!(
            verdict(
                json!([image(&url(&format!("data:image/png;base64,{PNG_1X1}")))]),
                &inline_only
            ),
            None,
            "a data: URL is inline data"
        );
    }

    #[test]
    fn count_and_size_limits_hold_at_their_edges() {
        let limits = InputLimits {
            max_media_parts: 2,
            max_media_bytes: 67,
            ..InputLimits::default()
        };
        // PNG_1X1 is 68 bytes decoded.
        let (code, message) = verdict(json!([image(&data("image/png", PNG_1X1))]), &limits)
            .expect("over max_media_bytes");
        assert_eq!(code, "media_too_large");
        assert!(message.contains("max_media_bytes"), "{message}");
        let limits = InputLimits {
            max_media_bytes: 68,
            ..limits
        };
        let two = json!([
            image(&data("image/png", PNG_1X1)),
            image(&data("image/png", PNG_1X1))
        ]);
        assert_eq!(verdict(two, &limits), None, "at both limits exactly");

        let three = json!([
            image(&data("image/png", PNG_1X1)),
            {"type": "text", "text": "text parts do not count"},
            image(&url("https://example.com/a.png")),
            {"type": "audio", "source": url("https://example.com/a.wav")},
        ]);
        let (code, message) = verdict(three, &limits).expect("over max_media_parts");
        assert_eq!(code, "too_many_media_parts");
        assert!(message.contains("max_media_parts"), "{message}");
    }
}
