//! Test-only: the choice sequence that the crate's grammar-shaped generators read their decisions
//! from. proptest draws the sequence (a `Vec<u8>`) and, when a property fails, shrinks it: a
//! shorter sequence or smaller bytes means fewer and earlier-listed choices, and an exhausted
//! sequence reads as zeros, so every generator ends on its simplest alternative. Generators are
//! written so that choice 0 is the simplest (no whitespace, no escape, the first item listed).

use proptest::collection::vec;
use proptest::prelude::{any, ProptestConfig, Strategy};

/// `default` cases, or `PROPTEST_CASES` when set (for a longer run by hand).
pub(crate) fn config_with_cases(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// A choice sequence of up to `max_len` bytes, for `proptest!` arguments.
pub(crate) fn choice_bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max_len)
}

#[derive(Debug)]
pub(crate) struct Choices<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Choices<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Choices { bytes, at: 0 }
    }

    /// The next `width` bytes as an integer, zeros once the sequence is used up.
    fn take(&mut self, width: usize) -> u64 {
        let mut value = 0u64;
        for _ in 0..width {
            let byte = self.bytes.get(self.at).copied().unwrap_or(0);
            self.at += 1;
            value = (value << 8) | u64::from(byte);
        }
        value
    }

    /// Any `u64`.
    pub(crate) fn next(&mut self) -> u64 {
        self.take(8)
    }

    /// In `0..n` (0 when `n` is 0), reading only as many bytes as `n` needs.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        let n = n.max(1) as u64;
        let width = if n <= 0x100 {
            1
        } else if n <= 0x1_0000 {
            2
        } else if n <= 0x1_0000_0000 {
            4
        } else {
            8
        };
        usize::try_from(self.take(width) % n).unwrap_or(0)
    }

    /// True about once in `n` (never for a zero choice).
    pub(crate) fn one_in(&mut self, n: usize) -> bool {
        n > 0 && self.below(n) == n - 1
    }

    /// True about `percent` times in 100 (never for a zero choice).
    pub(crate) fn percent(&mut self, percent: usize) -> bool {
        self.below(100) >= 100 - percent.min(100)
    }

    pub(crate) fn pick<'t, T>(&mut self, items: &'t [T]) -> &'t T {
        &items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::Choices;

    #[test]
    fn an_exhausted_sequence_makes_the_simplest_choices() {
        let mut choices = Choices::new(&[]);
        assert_eq!(choices.below(10), 0);
        assert!(!choices.one_in(3));
        assert!(!choices.percent(99));
        assert_eq!(*choices.pick(&["first", "second"]), "first");
        assert_eq!(choices.next(), 0);
    }

    #[test]
    fn choices_stay_in_range_and_wide_ranges_read_more_bytes() {
        let mut choices = Choices::new(&[255, 1, 2, 3, 4, 5]);
        assert_eq!(choices.below(7), 255 % 7);
        assert_eq!(choices.below(1_000), 0x0102);
        assert!(choices.below(3) < 3);
        assert!(choices.one_in(1));
    }
}
