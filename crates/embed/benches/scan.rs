//! The pass a search makes over every tool's vector, as built for the
//! processor's vector unit (what `cem_embed` picks at run time) against the
//! same sums in portable code, in one run.
//!
//! `cargo bench -p cem-embed --bench scan`. 10,000 rows of 384 values (a
//! catalog of 10,000 tools under a 384-wide transformer), and 2,000 (a
//! tenant's full records), as signed bytes
//! (`Quantized::dots`, what the transformer's search reads) and as floats
//! (`cem_embed::dots`, the built-in model's). Each way is timed 300 times,
//! the ways alternated; the rows stay in the processor's cache between
//! scans (in a search the model's run pushes some out). Prints one JSON
//! line a size with the medians in microseconds.

use std::hint::black_box;
use std::time::Instant;

use cem_embed::{Quantized, dot, dots};

const DIMS: usize = 384;

/// Pseudo-random unit vectors.
fn vectors(count: usize) -> Vec<f32> {
    let mut seed = 0x2545_f491_u32;
    let mut out = Vec::with_capacity(count * DIMS);
    for _ in 0..count {
        let mut v: Vec<f32> = (0..DIMS)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                (seed % 2001) as f32 / 1000.0 - 1.0
            })
            .collect();
        let norm = dot(&v, &v).sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        out.extend(v);
    }
    out
}

/// The byte scan as portable code, as `cem_embed` had it before it was
/// built per vector unit: sixteen running sums a row, which the compiler
/// keeps in (SSE2) vector registers.
fn portable_bytes(bytes: &[i8], scales: &[f32], q: &[i8], q_scale: f32) -> Vec<f32> {
    bytes
        .chunks_exact(DIMS)
        .zip(scales)
        .map(|(row, scale)| {
            let mut acc = [0i32; 16];
            for (x, y) in row.chunks_exact(16).zip(q.chunks_exact(16)) {
                for k in 0..16 {
                    acc[k] += i32::from(x[k]) * i32::from(y[k]);
                }
            }
            acc.iter().sum::<i32>() as f32 * scale * q_scale
        })
        .collect()
}

/// `v` rounded to bytes as `Quantized` rounds a row, with its scale.
fn to_bytes(v: &[f32]) -> (Vec<i8>, f32) {
    let largest = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    let to_byte = 127.0 / largest;
    (
        v.iter().map(|x| (x * to_byte).round() as i8).collect(),
        largest / 127.0,
    )
}

fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// One JSON line for `rows` rows.
fn measure(rows: usize) -> String {
    let values = vectors(rows);
    let query = vectors(1);
    let quantized = Quantized::new(&values, DIMS);
    let (mut bytes, mut scales) = (Vec::with_capacity(rows * DIMS), Vec::with_capacity(rows));
    for row in values.chunks_exact(DIMS) {
        let (b, s) = to_bytes(row);
        bytes.extend(b);
        scales.push(s);
    }
    let (q, q_scale) = to_bytes(&query);
    // The two ways must agree before their times mean anything.
    assert_eq!(
        quantized.dots(&query),
        portable_bytes(&bytes, &scales, &q, q_scale)
    );
    let row_by_row = |values: &[f32]| -> Vec<f32> {
        values
            .chunks_exact(DIMS)
            .map(|row| dot(&query, row))
            .collect()
    };
    assert_eq!(dots(&values, DIMS, &query), row_by_row(&values));

    let time = |f: &dyn Fn()| {
        let t0 = Instant::now();
        f();
        t0.elapsed().as_secs_f64() * 1e6
    };
    let mut runs: [Vec<f64>; 4] = Default::default();
    for _ in 0..300 {
        runs[0].push(time(&|| {
            black_box(quantized.dots(black_box(&query)));
        }));
        runs[1].push(time(&|| {
            black_box(portable_bytes(&bytes, &scales, black_box(&q), q_scale));
        }));
        runs[2].push(time(&|| {
            black_box(dots(&values, DIMS, black_box(&query)));
        }));
        runs[3].push(time(&|| {
            black_box(row_by_row(black_box(&values)));
        }));
    }
    let [bytes_built, bytes_portable, floats_built, floats_portable] = runs.map(median);
    #[cfg(target_arch = "x86_64")]
    let unit = if std::is_x86_feature_detected!("avx512vnni") {
        "avx512"
    } else if std::is_x86_feature_detected!("avx2") {
        "avx2"
    } else {
        "sse2"
    };
    #[cfg(not(target_arch = "x86_64"))]
    let unit = std::env::consts::ARCH;
    format!(
        "{{\"rows\": {}, \"dims\": {DIMS}, \"vector_unit\": \"{unit}\", \
         \"bytes_us\": {bytes_built:.1}, \"bytes_portable_us\": {bytes_portable:.1}, \
         \"bytes_ratio\": {:.2}, \"floats_us\": {floats_built:.1}, \
         \"floats_portable_us\": {floats_portable:.1}, \"floats_ratio\": {:.2}}}",
        rows,
        bytes_built / bytes_portable,
        floats_built / floats_portable,
    )
}

fn main() {
    // A catalog's tools; a tenant's full records.
    for rows in [10_000, 2_000] {
        println!("{}", measure(rows));
    }
}
