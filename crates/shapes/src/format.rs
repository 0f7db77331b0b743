//! Formats a string can be marked with: only those a filter can use
//! (compare dates, open links), found by pattern, never kept as text.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

/// A string format, as JSON Schema's `format` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// RFC 3339 (`2026-12-02T19:39:35Z`; a space for the `T`, seconds and
    /// the offset optional, as servers write them).
    DateTime,
    /// A calendar date (`2026-12-02`).
    Date,
    /// An absolute URL with an authority (`https://…`, `file://…`).
    Uri,
}

impl Format {
    /// The format `text` has, if any.
    pub fn of(text: &str) -> Option<Format> {
        static DATE_TIME: LazyLock<Option<Regex>> = LazyLock::new(|| {
            Regex::new(
                r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?$",
            )
            .ok()
        });
        static DATE: LazyLock<Option<Regex>> =
            LazyLock::new(|| Regex::new(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$").ok());
        static URI: LazyLock<Option<Regex>> =
            LazyLock::new(|| Regex::new(r"^[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s]+$").ok());
        // Long strings are none of these: no pattern is run over them.
        if text.len() > 2048 {
            return None;
        }
        let is = |re: &LazyLock<Option<Regex>>| re.as_ref().is_some_and(|re| re.is_match(text));
        if is(&DATE_TIME) {
            Some(Format::DateTime)
        } else if is(&DATE) {
            Some(Format::Date)
        } else if is(&URI) {
            Some(Format::Uri)
        } else {
            None
        }
    }

    /// The JSON Schema `format` keyword's value.
    pub fn name(self) -> &'static str {
        match self {
            Format::DateTime => "date-time",
            Format::Date => "date",
            Format::Uri => "uri",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_found_by_their_pattern() {
        for t in [
            "2026-12-02T19:39:35Z",
            "2026-12-02 19:39",
            "2026-12-02T19:39:35.123+01:00",
        ] {
            assert_eq!(Format::of(t), Some(Format::DateTime), "{t}");
        }
        assert_eq!(Format::of("2026-12-02"), Some(Format::Date));
        assert_eq!(
            Format::of("https://example.invalid/a?b=c"),
            Some(Format::Uri)
        );
        assert_eq!(Format::of("file:///tmp/x"), Some(Format::Uri));
        for t in [
            "2026-13-02",
            "v1.2.3",
            "hello world",
            "mailto:a@b",
            "12:30",
            "",
        ] {
            assert_eq!(Format::of(t), None, "{t}");
        }
    }
}
