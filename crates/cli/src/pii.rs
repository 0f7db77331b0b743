//! `pii detect` and `pii sanitize`: the detectors from the shell, for
//! checking what a text would look like to the model, and for the labelled
//! corpus tests.

use std::io::Read;
use std::process::ExitCode;

use anyhow::Context;
use cem_pii::{Found, Kind, Vault};
use serde_json::{Value, json};

use crate::args::PiiCommand;

pub fn run(cmd: &PiiCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        PiiCommand::Detect { types } => detect(&kinds(types)?),
        PiiCommand::Sanitize { types } => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read stdin (it must be UTF-8 text)")?;
            let out = Vault::new(usize::MAX).tokenize(&text, Found::in_text(&text), &kinds(types)?);
            print!("{}", out.text);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn kinds(names: &[String]) -> anyhow::Result<Vec<Kind>> {
    if names.is_empty() {
        return Ok(Kind::ALL.to_vec());
    }
    names
        .iter()
        .map(|n| {
            Kind::from_name(n.trim()).with_context(|| {
                let known: Vec<_> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("unknown type '{n}'; known: {}", known.join(", "))
            })
        })
        .collect()
}

fn detect(kinds: &[Kind]) -> anyhow::Result<ExitCode> {
    crate::json_lines::answer_each(|text| {
        // Character offsets, as Python indexes strings (findings come in
        // order, so one pass counts them).
        let (mut byte, mut chars) = (0, 0);
        let found: Vec<Value> = cem_pii::detect(text)
            .into_iter()
            .filter(|e| kinds.contains(&e.kind))
            .map(|e| {
                chars += text[byte..e.start].chars().count();
                let start = chars;
                chars += text[e.start..e.end].chars().count();
                byte = e.end;
                json!({"type": e.kind.name(), "start": start, "end": chars, "text": &text[e.start..e.end]})
            })
            .collect();
        Value::Array(found).to_string()
    })
}
