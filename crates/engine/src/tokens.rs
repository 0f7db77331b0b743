//! Token accounting: what the tool results would have cost in the model's
//! context, against what the answer costs. o200k, embedded in the binary
//! (tiktoken-rs ships the vocabulary; nothing is downloaded).
//!
//! Accounting is host work done for an execution, so it is bounded by that
//! execution: each result is counted as it arrives, on one low-priority
//! thread shared by the whole server (`cem-tokens`), from a copy of at most
//! [`SAMPLE`] bytes (the rest is extrapolated from the sample's ratio); no
//! result is kept. Work queued for an execution that has answered is
//! skipped, and when the queue is full a result is estimated from its size
//! rather than queued: a tenant looping over 15 MB results can neither grow
//! the server's memory nor delay its own answer or anyone else's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tiktoken_rs::CoreBPE;

use crate::ExecAnswer;

/// Bytes of one text counted exactly; beyond, the count is extrapolated.
pub const SAMPLE: usize = 64 << 10;
/// Texts waiting for the counting thread, server-wide.
const QUEUE: usize = 64;
/// Bytes a token stands for when a text is estimated, not counted (o200k
/// averages about four bytes a token on English and JSON).
const BYTES_PER_TOKEN: u64 = 4;

/// How long the vocabulary stays loaded after its last count. tiktoken's
/// o200k tables take some 47 MiB (each of the 200,000 tokens' bytes is
/// kept three times, in two maps and a sorted list): a server holds them
/// while its executions call tools, not for the rest of its life.
const IDLE_RELEASE: Duration = Duration::from_secs(60);

/// The o200k vocabulary, loaded on first use and let go when idle.
struct Vocabulary {
    loaded: Mutex<Option<Arc<CoreBPE>>>,
    last_used: Mutex<Instant>,
}

fn vocabulary() -> &'static Vocabulary {
    static VOCABULARY: OnceLock<Vocabulary> = OnceLock::new();
    VOCABULARY.get_or_init(|| Vocabulary {
        loaded: Mutex::new(None),
        last_used: Mutex::new(Instant::now()),
    })
}

/// The vocabulary, loading it if it is not (None if it cannot load).
fn bpe() -> Option<Arc<CoreBPE>> {
    let v = vocabulary();
    if let Ok(mut last) = v.last_used.lock() {
        *last = Instant::now();
    }
    let mut loaded = v.loaded.lock().ok()?;
    if loaded.is_none() {
        *loaded = tiktoken_rs::o200k_base().ok().map(Arc::new);
    }
    loaded.clone()
}

/// Lets the vocabulary go when nothing counted for `after` (the server's
/// heap trimming then hands its pages back); whoever counts next loads it
/// again. Whether it was let go.
fn release_if_idle(after: Duration) -> bool {
    let v = vocabulary();
    let idle = v
        .last_used
        .lock()
        .map(|last| last.elapsed() >= after)
        .unwrap_or(false);
    match v.loaded.lock() {
        Ok(mut loaded) if idle && loaded.is_some() => {
            *loaded = None;
            true
        }
        _ => false,
    }
}

/// o200k tokens of `text` (0 if the tokenizer could not load). Costs time
/// in proportion to the text: the host's own accounting goes through
/// [`Meter`] instead.
pub fn count(text: &str) -> u64 {
    bpe()
        .map(|b| b.encode_with_special_tokens(text).len() as u64)
        .unwrap_or(0)
}

/// The first [`SAMPLE`] bytes of `text` (cut at a character boundary).
fn sample(text: &str) -> &str {
    if text.len() <= SAMPLE {
        return text;
    }
    let mut end = SAMPLE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Tokens of a text of `len` bytes whose first bytes are `sample`:
/// counted over the sample, scaled to the whole.
fn counted(sample: &str, len: usize) -> u64 {
    let n = count(sample);
    if sample.len() >= len || sample.is_empty() {
        return n;
    }
    (n as u128 * len as u128 / sample.len() as u128) as u64
}

fn estimate(len: usize) -> u64 {
    (len as u64).div_ceil(BYTES_PER_TOKEN)
}

struct Job {
    sample: String,
    len: usize,
    meter: Arc<Tally>,
}

/// The counting thread's queue, started on first use (`None` if the
/// thread cannot start: then every text is estimated).
fn queue() -> Option<&'static SyncSender<Job>> {
    static QUEUE_TX: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    QUEUE_TX
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Job>(QUEUE);
            std::thread::Builder::new()
                .name("cem-tokens".into())
                .spawn(move || {
                    // Accounting is worth only the CPU nobody else wants.
                    if let Ok(cpu) = cem_sandbox::CpuPriority::get()
                        && let Err(e) = cpu.join_background_thread()
                    {
                        tracing::debug!(error = %e, "token accounting runs at full CPU priority");
                    }
                    loop {
                        match rx.recv_timeout(IDLE_RELEASE) {
                            Ok(job) => job.meter.settle(&job),
                            Err(RecvTimeoutError::Timeout) => {
                                if release_if_idle(IDLE_RELEASE) {
                                    tracing::debug!(
                                        "the o200k vocabulary was let go after a minute unused"
                                    );
                                }
                            }
                            Err(RecvTimeoutError::Disconnected) => break,
                        }
                    }
                })
                .ok()?;
            Some(tx)
        })
        .as_ref()
}

#[derive(Default)]
struct Counts {
    /// Tokens counted (or estimated for good).
    tokens: u64,
    /// Estimates standing in for texts still queued.
    pending: u64,
}

#[derive(Default)]
struct Tally {
    counts: Mutex<Counts>,
    /// The execution answered: queued texts are not counted any more.
    closed: AtomicBool,
}

impl Tally {
    fn settle(&self, job: &Job) {
        let exact = if self.closed.load(Ordering::Acquire) {
            None
        } else {
            Some(counted(&job.sample, job.len))
        };
        if let Ok(mut c) = self.counts.lock() {
            let guess = estimate(job.len);
            c.pending = c.pending.saturating_sub(guess);
            c.tokens += exact.unwrap_or(guess);
        }
    }

    fn add(&self, tokens: u64, pending: u64) {
        if let Ok(mut c) = self.counts.lock() {
            c.tokens += tokens;
            c.pending += pending;
        }
    }
}

/// The token count of one execution's tool results, taken as they arrive.
#[derive(Clone, Default)]
pub struct Meter(Arc<Tally>);

impl Meter {
    /// Counts one result (its JSON): queued for the counting thread, or
    /// estimated from its size when the queue is full or the execution
    /// has answered.
    pub fn record(&self, text: &str) {
        let len = text.len();
        let guess = estimate(len);
        if self.0.closed.load(Ordering::Acquire) {
            return self.0.add(guess, 0);
        }
        let Some(queue) = queue() else {
            return self.0.add(guess, 0);
        };
        self.0.add(0, guess);
        let job = Job {
            sample: sample(text).to_string(),
            len,
            meter: self.0.clone(),
        };
        if let Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) = queue.try_send(job)
        {
            // Not queued: its estimate is its count.
            if let Ok(mut c) = job.meter.counts.lock() {
                c.pending = c.pending.saturating_sub(guess);
                c.tokens += guess;
            }
        }
    }

    /// Stops counting (texts still queued are skipped) and gives the
    /// total: counted, plus estimates for what was not.
    pub fn close(&self) -> u64 {
        self.0.closed.store(true, Ordering::Release);
        self.0
            .counts
            .lock()
            .map(|c| c.tokens + c.pending)
            .unwrap_or(0)
    }
}

/// `{"tool_results": N, "returned": M, "kept_out_of_context": N - M}`,
/// with `inside` the execution's [`Meter`] total. The answer is counted
/// over its first [`SAMPLE`] bytes (it is capped by `max_output_chars`).
pub fn account(inside: u64, answer: &ExecAnswer, table_rows: usize) -> Value {
    // What the model reads: the answer's text, not its structured part.
    let returned = serde_json::to_value(answer)
        .map(|body| crate::envelope::text(&body, table_rows))
        .map(|s| counted(sample(&s), s.len()))
        .unwrap_or(0);
    json!({"tool_results": inside, "returned": returned, "kept_out_of_context": inside.saturating_sub(returned)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_results_are_counted_exactly() {
        let meter = Meter::default();
        let text = r#"{"name": "ana", "items": [1, 2, 3], "note": "a short result"}"#;
        meter.record(text);
        meter.record(text);
        // The thread counts in order; wait for it by polling the pending part.
        // Not for a second only: the thread runs in the background cpu group
        // (weight 16) and loads the tokenizer first, and beside a loaded test
        // run it took longer (the count came out as the estimate).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while meter.0.counts.lock().map(|c| c.pending).unwrap_or(1) != 0
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(meter.close(), 2 * count(text));
    }

    #[test]
    fn the_vocabulary_is_let_go_when_idle_and_loaded_again_on_use() {
        let text = "a short text, counted twice";
        let first = count(text);
        assert!(first > 0);
        assert!(!release_if_idle(Duration::from_secs(3600)), "just used");
        assert!(release_if_idle(Duration::ZERO));
        assert!(vocabulary().loaded.lock().is_ok_and(|l| l.is_none()));
        assert!(!release_if_idle(Duration::ZERO), "nothing left to let go");
        assert_eq!(count(text), first);
    }

    #[test]
    fn large_results_are_extrapolated_from_a_sample() {
        let text = "word, ".repeat(50_000); // 300 KB
        let exact = count(&text);
        let guess = counted(sample(&text), text.len());
        let off = exact.abs_diff(guess) as f64 / exact as f64;
        assert!(off < 0.02, "exact {exact}, extrapolated {guess}");
    }

    #[test]
    fn a_closed_meter_estimates_and_keeps_nothing() {
        let meter = Meter::default();
        meter.close();
        meter.record(&"x".repeat(4000));
        assert_eq!(meter.close(), 1000);
    }

    #[test]
    fn a_sample_ends_on_a_character_boundary() {
        let text = "é".repeat(SAMPLE);
        let s = sample(&text);
        assert!(s.len() <= SAMPLE && s.len() >= SAMPLE - 1);
    }
}
