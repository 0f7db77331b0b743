//! `cem_config::Requirement::parse` on arbitrary UTF-8: requirement strings
//! come from the config, from `execute_code`'s `requirements` and from
//! `install()` in sandboxed code, and go to an installer on the host. Never
//! panics; what it accepts is a plain requirement (no URL, path, option,
//! marker or shell syntax), stable when parsed again.

#![no_main]

use cem_config::{Requirement, normalize_package};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = normalize_package(text);
    let Ok(requirement) = Requirement::parse(text) else {
        return;
    };
    let canonical = requirement.as_str();
    assert!(
        !canonical
            .chars()
            .any(|c| "@/\\;:'\"$`|&?#% \t\r\n".contains(c) || c.is_control()),
        "accepted {text:?} as {canonical:?}"
    );
    assert!(
        !canonical.starts_with('-'),
        "accepted an option: {text:?} as {canonical:?}"
    );
    assert!(canonical.starts_with(requirement.name()));
    assert_eq!(normalize_package(requirement.name()), requirement.name());
    // The canonical text is itself a requirement, the same one.
    let again = Requirement::parse(canonical)
        .unwrap_or_else(|e| panic!("{text:?} became {canonical:?}, which is refused: {e}"));
    assert_eq!(again, requirement, "{text:?}");
});
