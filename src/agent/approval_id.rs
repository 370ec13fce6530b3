//! `ApprovalId`: the token that names one approval, as it travels in interrupt ids and 0.x
//! approval call ids. It owns the wire spelling (one canonical form, bounded size); what the
//! tag proves is [`crate::agent::approval`]'s business.
//!
//! Spelling: `apr_` then unpadded base64url of `version (1) | key id (4) | expiry (8, Unix
//! seconds, 0: none) | tag (16) | restore data (0..=8 KiB)`. The decoder refuses padding and
//! unused trailing bits, so an id has exactly one spelling, and refuses anything longer than
//! [`MAX_APPROVAL_ID_LEN`] before decoding.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// Length of the key id: which of `security.approval_keys` signed the id.
pub const KEY_ID_LEN: usize = 4;
/// Length of the tag (HMAC-SHA256 truncated to 128 bits).
pub const TAG_LEN: usize = 16;
/// Most restore data an id carries (canonical JSON of the values a rejected prediction puts
/// back). Larger values are not carried: see the predictive state middleware.
pub const MAX_RESTORE_BYTES: usize = 8 * 1024;

const PREFIX: &str = "apr_";
/// 2: the tag binds the caller's scope too. Ids of version 1 do not parse, so a question open
/// across the upgrade must be asked again.
const VERSION: u8 = 2;
const HEADER_LEN: usize = 1 + KEY_ID_LEN + 8 + TAG_LEN;

/// The longest id there can be (about 11 KB): anything longer is refused unread.
pub const MAX_APPROVAL_ID_LEN: usize =
    PREFIX.len() + ((HEADER_LEN + MAX_RESTORE_BYTES) * 4).div_ceil(3);

/// A parsed approval id. Comparing two is comparing their spellings.
#[derive(Clone, PartialEq, Eq)]
pub struct ApprovalId {
    pub(crate) key_id: [u8; KEY_ID_LEN],
    /// Unix seconds; 0: never expires.
    pub(crate) expires: u64,
    pub(crate) tag: [u8; TAG_LEN],
    /// Restore data (never empty when present).
    pub(crate) restore: Option<Vec<u8>>,
}

/// Why a string is not an approval id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalIdError {
    #[error("not an approval id")]
    Malformed,
    #[error("longer than any approval id")]
    TooLong,
}

impl ApprovalId {
    /// A short form for logs and error messages (ids carrying restore data are long).
    pub fn abbreviated(&self) -> String {
        abbreviate(&self.to_string())
    }

    fn to_bytes(&self) -> Vec<u8> {
        let restore = self.restore.as_deref().unwrap_or_default();
        let mut bytes = Vec::with_capacity(HEADER_LEN + restore.len());
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.key_id);
        bytes.extend_from_slice(&self.expires.to_be_bytes());
        bytes.extend_from_slice(&self.tag);
        bytes.extend_from_slice(restore);
        bytes
    }
}

impl fmt::Display for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        f.write_str(&URL_SAFE_NO_PAD.encode(self.to_bytes()))
    }
}

impl fmt::Debug for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.abbreviated())
    }
}

impl FromStr for ApprovalId {
    type Err = ApprovalIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.len() > MAX_APPROVAL_ID_LEN {
            return Err(ApprovalIdError::TooLong);
        }
        let encoded = text
            .strip_prefix(PREFIX)
            .ok_or(ApprovalIdError::Malformed)?;
        // Strict: no padding, no set unused bits, so one byte string has one spelling.
        let bytes = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| ApprovalIdError::Malformed)?;
        if bytes.len() < HEADER_LEN || bytes[0] != VERSION {
            return Err(ApprovalIdError::Malformed);
        }
        let (key_id, rest) = bytes[1..].split_at(KEY_ID_LEN);
        let (expires, rest) = rest.split_at(8);
        let (tag, restore) = rest.split_at(TAG_LEN);
        let id = ApprovalId {
            key_id: key_id.try_into().map_err(|_| ApprovalIdError::Malformed)?,
            expires: u64::from_be_bytes(
                expires.try_into().map_err(|_| ApprovalIdError::Malformed)?,
            ),
            tag: tag.try_into().map_err(|_| ApprovalIdError::Malformed)?,
            restore: (!restore.is_empty()).then(|| restore.to_vec()),
        };
        Ok(id)
    }
}

/// Any would-be id as logs and error messages quote it: ids can carry kilobytes of restore
/// data, and a client's string may be anything.
pub fn abbreviate(text: &str) -> String {
    match text.char_indices().nth(24) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(restore: Option<Vec<u8>>) -> ApprovalId {
        ApprovalId {
            key_id: [1, 2, 3, 4],
            expires: 1_796_035_323,
            tag: [7; TAG_LEN],
            restore,
        }
    }

    #[test]
    fn an_id_reads_back_from_its_one_spelling() {
        for id in [sample(None), sample(Some(br#"[["a",1,true]]"#.to_vec()))] {
            let text = id.to_string();
            assert!(text.starts_with("apr_"), "{text}");
            assert!(
                text[4..]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{text}"
            );
            assert_eq!(text.parse::<ApprovalId>(), Ok(id));
        }
    }

    #[test]
    fn other_spellings_of_the_same_bytes_are_refused() {
        let text = sample(None).to_string(); // 29 bytes: 39 characters, 2 unused bits
        assert_eq!(
            format!("{text}=").parse::<ApprovalId>(),
            Err(ApprovalIdError::Malformed)
        );
        let last = text.chars().last().unwrap();
        let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let digit = alphabet.find(last).unwrap();
        let same_bits = alphabet.chars().nth(digit | 1).unwrap();
        assert_ne!(
            same_bits, last,
            "the sample ends with the unused bits clear"
        );
        let sloppy = format!("{}{same_bits}", &text[..text.len() - 1]);
        assert_eq!(
            sloppy.parse::<ApprovalId>(),
            Err(ApprovalIdError::Malformed)
        );
        let standard = text
            .replace('_', "/")
            .replace('-', "+")
            .replacen("apr/", "apr_", 1);
        if standard != text {
            assert!(standard.parse::<ApprovalId>().is_err());
        }
        for bad in ["", "apr_", "apr_AAAA", "APR_", "garbage", "apr_0_deadbeef"] {
            assert_eq!(
                bad.parse::<ApprovalId>(),
                Err(ApprovalIdError::Malformed),
                "{bad}"
            );
        }
    }

    #[test]
    fn ids_are_bounded() {
        let largest = sample(Some(vec![b'x'; MAX_RESTORE_BYTES]));
        let text = largest.to_string();
        assert!(
            text.len() <= MAX_APPROVAL_ID_LEN,
            "{} > {MAX_APPROVAL_ID_LEN}",
            text.len()
        );
        const { assert!(MAX_APPROVAL_ID_LEN < 11_100) };
        assert_eq!(text.parse::<ApprovalId>(), Ok(largest));
        let longer = format!("{text}AAAA");
        assert_eq!(longer.parse::<ApprovalId>(), Err(ApprovalIdError::TooLong));
        assert!(sample(Some(vec![b'x'; 100])).abbreviated().chars().count() <= 25);
    }
}
