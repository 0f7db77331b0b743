//! A stdio server's stderr, into our log within a budget.
//!
//! A server may write what it likes to stderr, and a tenant can make it
//! write (any server that logs its input). Unbounded, 300 MB of stderr
//! became 316 MB of our log in 3.5 s. So each process gets a rate (lines a
//! second, with a burst of as many again) and a total (bytes); lines over
//! the rate are counted and said in one "N lines dropped" line once the
//! rate allows again, and after the total one line says the rest is
//! dropped. The pipe is always drained (a server blocked on a full stderr
//! pipe would stop answering), and a line is cut at [`MAX_LINE_BYTES`]
//! while it is read, so a line without end holds no memory.

use std::time::Instant;

use cem_config::Redactor;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// The longest line kept; the rest of a longer one is skipped.
pub const MAX_LINE_BYTES: usize = 2000;

/// How much of the pipe is read at once.
const READ_BYTES: usize = 64 << 10;

/// How much of its stderr one process may put in the log.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Lines a second (0: none at all).
    pub lines_per_second: u64,
    /// Bytes in all (0: none at all).
    pub max_bytes: u64,
}

/// One server's budget, shared by its processes one after another (a
/// restarted process goes on with what the last one left).
#[derive(Clone)]
pub struct SharedGate(std::sync::Arc<std::sync::Mutex<Gate>>);

impl SharedGate {
    pub fn new(budget: Budget) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(Gate::new(
            budget,
            Instant::now(),
        ))))
    }

    fn admit(&self, len: usize) -> Verdict {
        match self.0.lock() {
            Ok(mut gate) => gate.admit(len, Instant::now()),
            Err(_) => Verdict::Drop,
        }
    }

    fn budget(&self) -> Budget {
        self.0.lock().map_or(
            Budget {
                lines_per_second: 0,
                max_bytes: 0,
            },
            |g| g.budget,
        )
    }
}

/// Reads `stderr` to its end, logging what the budget allows under the
/// `upstream` target, with the config's secrets removed.
pub async fn forward(
    stderr: impl AsyncRead + Unpin,
    server: String,
    secrets: Redactor,
    gate: SharedGate,
) {
    let mut lines = Lines::new(stderr);
    let mut dropped = 0u64;
    while let Some(line) = lines.next().await {
        let verdict = gate.admit(line.len());
        if !matches!(verdict, Verdict::Log { .. }) {
            dropped += 1;
        }
        match verdict {
            Verdict::Log { dropped } => {
                if dropped > 0 {
                    tracing::warn!(target: "upstream", server = %server, "{dropped} lines of this server's stderr dropped (over upstream.stderr_lines_per_second)");
                }
                // Control characters (a terminal's escapes, a carriage
                // return rewriting the line) do not reach the log as such.
                let text: String = String::from_utf8_lossy(&line)
                    .chars()
                    .map(|c| {
                        if c.is_control() && c != '\t' {
                            '\u{fffd}'
                        } else {
                            c
                        }
                    })
                    .collect();
                let text = secrets.redact(&text);
                tracing::info!(target: "upstream", server = %server, "{text}");
            }
            Verdict::Drop => {}
            Verdict::Exhausted => {
                tracing::warn!(target: "upstream", server = %server, "this server's stderr reached upstream.stderr_max_bytes ({} bytes); the rest of it is dropped", gate.budget().max_bytes);
            }
        }
    }
    if dropped > 0 {
        tracing::warn!(target: "upstream", server = %server, "{dropped} lines of this server's stderr were dropped in all (upstream.stderr_lines_per_second, upstream.stderr_max_bytes)");
    }
}

/// Lines of at most [`MAX_LINE_BYTES`], read from a stream.
struct Lines<R> {
    read: BufReader<R>,
    line: Vec<u8>,
    /// Skipping the rest of a line over the length.
    skipping: bool,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(read: R) -> Self {
        Self {
            // A server flooding its stderr is drained in large reads: a
            // tenant's loop made one write 20 MB a call, and 8 KiB reads of
            // it took a good part of a core.
            read: BufReader::with_capacity(READ_BYTES, read),
            line: Vec::new(),
            skipping: false,
        }
    }

    /// The next line without its newline (cut), None at the end.
    async fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            let available = match self.read.fill_buf().await {
                Ok([]) | Err(_) => {
                    // The last line, without a newline.
                    return (!self.line.is_empty()).then(|| std::mem::take(&mut self.line));
                }
                Ok(available) => available,
            };
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |at| at + 1);
            if !self.skipping {
                let part = &available[..newline.unwrap_or(take)];
                let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
                self.line.extend_from_slice(&part[..part.len().min(room)]);
                if part.len() > room {
                    self.skipping = true;
                }
            }
            self.read.consume(take);
            if newline.is_some() {
                self.skipping = false;
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Some(line);
            }
        }
    }
}

/// What becomes of one line.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Logged, after saying how many were dropped since the last one logged.
    Log {
        dropped: u64,
    },
    Drop,
    /// The total is reached with this line: said once, then every line drops.
    Exhausted,
}

/// A token bucket of lines and a byte total.
struct Gate {
    budget: Budget,
    tokens: f64,
    at: Instant,
    bytes: u64,
    exhausted: bool,
    /// Dropped since the last line logged.
    dropped: u64,
}

impl Gate {
    fn new(budget: Budget, now: Instant) -> Self {
        Self {
            budget,
            tokens: Self::burst(budget),
            at: now,
            bytes: 0,
            exhausted: false,
            dropped: 0,
        }
    }

    /// A second's worth of lines, once more, may come at once.
    fn burst(budget: Budget) -> f64 {
        budget.lines_per_second as f64 * 2.0
    }

    fn admit(&mut self, len: usize, now: Instant) -> Verdict {
        if self.exhausted {
            return Verdict::Drop;
        }
        let len = len as u64 + 1;
        if self.bytes.saturating_add(len) > self.budget.max_bytes {
            self.exhausted = true;
            return Verdict::Exhausted;
        }
        let elapsed = now.saturating_duration_since(self.at);
        self.at = now;
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.budget.lines_per_second as f64)
            .min(Self::burst(self.budget));
        if self.tokens < 1.0 {
            self.dropped += 1;
            return Verdict::Drop;
        }
        self.tokens -= 1.0;
        self.bytes += len;
        Verdict::Log {
            dropped: std::mem::take(&mut self.dropped),
        }
    }
}

/// How long the bucket takes to give one line back, for the tests.
#[cfg(test)]
fn one_line(budget: Budget) -> std::time::Duration {
    std::time::Duration::from_secs_f64(1.0 / budget.lines_per_second as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Budget = Budget {
        lines_per_second: 10,
        max_bytes: 1000,
    };

    #[test]
    fn a_burst_over_the_rate_is_counted_and_said_once_the_rate_allows() {
        let start = Instant::now();
        let mut gate = Gate::new(BUDGET, start);
        let logged = (0..50)
            .filter(|_| matches!(gate.admit(1, start), Verdict::Log { .. }))
            .count();
        assert_eq!(logged, 20, "a burst of two seconds' worth");
        let later = start + one_line(BUDGET) * 2;
        assert_eq!(gate.admit(1, later), Verdict::Log { dropped: 30 });
        assert_eq!(gate.admit(1, later), Verdict::Log { dropped: 0 });
    }

    #[test]
    fn the_total_ends_the_log_with_one_line() {
        let budget = Budget {
            lines_per_second: 1_000_000,
            max_bytes: 100,
        };
        let now = Instant::now();
        let mut gate = Gate::new(budget, now);
        let verdicts: Vec<Verdict> = (0..12).map(|_| gate.admit(9, now)).collect();
        assert_eq!(
            verdicts
                .iter()
                .filter(|v| matches!(v, Verdict::Log { .. }))
                .count(),
            10
        );
        assert_eq!(verdicts[10], Verdict::Exhausted);
        assert_eq!(verdicts[11], Verdict::Drop);
    }

    #[tokio::test]
    async fn a_line_without_end_is_cut_while_it_is_read() {
        let mut text = vec![b'x'; 5 << 20];
        text.extend_from_slice(b"\nnext\r\n");
        let mut lines = Lines::new(&text[..]);
        let first = lines.next().await.unwrap_or_default();
        assert_eq!(first.len(), MAX_LINE_BYTES);
        assert_eq!(lines.next().await.as_deref(), Some(&b"next"[..]));
        assert_eq!(lines.next().await, None);
    }
}
