//! Text as Python source: the one escaper every string literal of the
//! generated code is written with, and the cleaning of text that goes into
//! docstrings and comments. Upstreams name and describe their tools as they
//! like; what they write must come out as Python that compiles.

/// A Python string literal of any text: the one way the generated code
/// writes a string. Printable ASCII stays as it is; everything else is a
/// `\xNN`, `\uNNNN` or `\UNNNNNNNN` escape, which every Python reads
/// (Rust's `{:?}` writes `\u{200b}`, which Python rejects, and the whole
/// package failed to import).
pub fn string_literal(text: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        let code = u32::from(c);
        // Writing to a String cannot fail.
        let _ = match c {
            '"' => write!(out, "\\\""),
            '\\' => write!(out, "\\\\"),
            ' '..='~' => write!(out, "{c}"),
            _ if code < 0x100 => write!(out, "\\x{code:02x}"),
            _ if code < 0x1_0000 => write!(out, "\\u{code:04x}"),
            _ => write!(out, "\\U{code:08x}"),
        };
    }
    out.push('"');
    out
}

/// Text of a docstring or comment without the characters that have no
/// business there: control characters (a NUL makes the file unreadable to
/// Python) and the invisible format and separator characters (zero-width
/// spaces, bidirectional overrides that make source read other than it
/// runs, U+2028). Tabs and the other spacing controls become spaces; `\n`
/// stays when `lines` is set (a comment is one line: then it is a space).
pub fn clean_text(text: &str, lines: bool) -> String {
    text.chars()
        .filter_map(|c| match c {
            '\n' if lines => Some('\n'),
            '\n' | '\t' | '\r' | '\u{b}' | '\u{c}' | '\u{85}' | '\u{2028}' | '\u{2029}' => {
                Some(' ')
            }
            c if c.is_control() || invisible(c) => None,
            c => Some(c),
        })
        .collect()
}

/// Unicode's format characters (category Cf, Unicode 15) and line and
/// paragraph separators (Zl, Zp).
pub(crate) fn invisible(c: char) -> bool {
    matches!(
        u32::from(c),
        0xAD | 0x600..=0x605
            | 0x61C
            | 0x6DD
            | 0x70F
            | 0x890..=0x891
            | 0x8E2
            | 0x180E
            | 0x200B..=0x200F
            | 0x2028..=0x202E
            | 0x2060..=0x2064
            | 0x2066..=0x206F
            | 0xFEFF
            | 0xFFF9..=0xFFFB
            | 0x110BD
            | 0x110CD
            | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0001
            | 0xE0020..=0xE007F
    )
}
