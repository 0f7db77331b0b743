//! The bridge between the sandbox and the host: what sandboxed code writes
//! on the runtime's stdout is read by the engine as JSON lines (one message
//! each, `{"type": "call" | "search" | "pii" | ...}`), through
//! `cem_engine::decode_output` (the exchange's own reader). The code in the
//! sandbox is hostile: the reader must never panic, however the bytes are
//! cut, and must find exactly what a plain line-by-line JSON decoder finds.

#![no_main]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// The runtime's stdout, `step` bytes a read at most (the size varying),
/// as a pipe delivers it.
struct Pipe {
    data: Vec<u8>,
    at: usize,
    step: usize,
}

impl AsyncRead for Pipe {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self
            .step
            .min(self.data.len() - self.at)
            .min(buf.remaining());
        let at = self.at;
        buf.put_slice(&self.data[at..at + n]);
        self.at += n;
        if self.step < usize::MAX {
            self.step = self.step % 13 + 1;
        }
        Poll::Ready(Ok(()))
    }
}

fn decode(data: &[u8], step: usize) -> Vec<(Result<Value, String>, usize)> {
    cem_engine::decode_output(Box::new(Pipe {
        data: data.to_vec(),
        at: 0,
        step,
    }))
}

fuzz_target!(|data: &[u8]| {
    let whole = decode(data, usize::MAX);
    // Every complete line is one message (the last, unterminated, is not:
    // the runtime died mid-line), decoded as serde_json decodes it alone.
    let lines: Vec<&[u8]> = data.split_inclusive(|b| *b == b'\n').collect();
    let complete = lines.iter().filter(|l| l.ends_with(b"\n")).count();
    assert_eq!(whole.len(), complete, "messages against complete lines");
    for ((decoded, size), line) in whole.iter().zip(&lines) {
        assert_eq!(*size, line.len(), "the size of {line:?}");
        let alone = serde_json::from_slice::<Value>(line).ok();
        assert_eq!(decoded.as_ref().ok(), alone.as_ref(), "{line:?}");
    }
    // A pipe hands over bytes in pieces: the cut must not matter.
    let cut = decode(data, 1 + data.first().map_or(0, |b| usize::from(*b % 7)));
    assert_eq!(cut, whole, "decoded differently when read in pieces");
});
