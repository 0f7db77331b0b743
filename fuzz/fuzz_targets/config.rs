//! `cem_config::parse_str` and `cem_config::expand::expand` on arbitrary
//! UTF-8 text: a config file (`mcp_config.json`) is the user's, but it is
//! also what an editor, a generator or an attacker-supplied project wrote.
//! Neither may panic, whatever the text; and what the config says back
//! (errors, warnings) quotes values as written, so a credential `${VAR}`
//! brought in never shows there.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

/// A credential in the environment.
const TOKEN: &str = "ghp_0123456789abcdefghijABCDEFGHIJ012345";

/// The environment `${VAR}` reads: a few names set (one empty, one a
/// credential, one holding `${...}` itself, which must not be expanded
/// again), every other name unset.
fn lookup(name: &str) -> Option<String> {
    let value = match name {
        "HOME" => "/home/fuzz",
        "EMPTY" => "",
        "PORT" => "8080",
        "GITHUB_TOKEN" | "API_KEY" => TOKEN,
        "NESTED" => "${HOME}/x",
        "URL" => "https://user:pa55word@example.com/mcp?token=abc",
        "UNICODE" => "é\u{1F600}\u{0}",
        _ => return None,
    };
    Some(value.to_string())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let said = match cem_config::parse_str(text, Path::new("/fuzz/mcp_config.json"), &lookup) {
        Ok(parsed) => {
            // Formatting walks every field.
            let _ = format!("{parsed:?}");
            let warnings: Vec<String> = parsed.warnings.iter().map(ToString::to_string).collect();
            warnings.join("\n")
        }
        Err(e) => e.to_string(),
    };
    if !text.contains(TOKEN) {
        assert!(!said.contains(TOKEN), "an expanded credential in: {said}");
    }
    match cem_config::expand::expand(text, &lookup) {
        Ok(expanded) => {
            if !text.contains("${") {
                assert_eq!(expanded, text, "text without ${{ changed by expansion");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
