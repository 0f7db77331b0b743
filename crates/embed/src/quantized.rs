//! Many vectors kept as signed bytes, each with its own scale: what a
//! search compares a query with (one row per tool). A quarter of the memory
//! of `f32` rows, and a quarter of what a search reads: over 10,000 tools
//! of a 384-wide model, 3.8 MB instead of 15 MB, which no longer pushes a
//! transformer's weights out of the processor's cache between two searches.
//! A cosine moves by about a thousandth (`dots_are_close_to_the_exact_ones`).

/// `count × dims` signed bytes and one scale per row: row `i`'s value `k`
/// is `bytes[i·dims + k] × scales[i]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quantized {
    dims: usize,
    bytes: Vec<i8>,
    scales: Vec<f32>,
}

impl Quantized {
    /// The rows of `values` (`dims` wide; a last partial row is dropped).
    pub fn new(values: &[f32], dims: usize) -> Self {
        let mut quantized = Quantized {
            dims,
            ..Quantized::default()
        };
        if dims == 0 {
            return quantized;
        }
        for row in values.chunks_exact(dims) {
            let scale = quantize_into(row, &mut quantized.bytes);
            quantized.scales.push(scale);
        }
        quantized
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.scales.len()
    }

    pub fn is_empty(&self) -> bool {
        self.scales.is_empty()
    }

    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Row `index` as `f32` values (as the rows hold it, rounded).
    pub fn row(&self, index: usize) -> Option<Vec<f32>> {
        let scale = *self.scales.get(index)?;
        let bytes = self.bytes.get(index * self.dims..(index + 1) * self.dims)?;
        Some(bytes.iter().map(|b| f32::from(*b) * scale).collect())
    }

    /// The dot of `query` (`dims` wide) with every row, in order; zeros for
    /// a query of another width. The query is rounded to bytes as the rows
    /// are, so each dot is a sum of byte products.
    pub fn dots(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dims || self.dims == 0 {
            return vec![0.0; self.len()];
        }
        let mut q = Vec::with_capacity(self.dims);
        let q_scale = quantize_into(query, &mut q);
        scan_bytes(&self.bytes, &self.scales, &q, q_scale)
    }
}

/// Rows of vectors as a search reads them: as computed, or as bytes
/// ([`Quantized`]) where what a search reads must stay small.
#[derive(Debug, Clone, PartialEq)]
pub enum Rows {
    Exact { dims: usize, values: Vec<f32> },
    Bytes(Quantized),
}

impl Default for Rows {
    fn default() -> Self {
        Rows::Exact {
            dims: 0,
            values: Vec::new(),
        }
    }
}

impl Rows {
    /// The rows of `values` (`dims` wide), as bytes or not.
    pub fn new(values: Vec<f32>, dims: usize, bytes: bool) -> Rows {
        if bytes {
            Rows::Bytes(Quantized::new(&values, dims))
        } else {
            Rows::Exact { dims, values }
        }
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        match self {
            Rows::Exact { dims, values } => values.len() / (*dims).max(1),
            Rows::Bytes(q) => q.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dims(&self) -> usize {
        match self {
            Rows::Exact { dims, .. } => *dims,
            Rows::Bytes(q) => q.dims(),
        }
    }

    /// Row `index` as `f32` values.
    pub fn row(&self, index: usize) -> Option<Vec<f32>> {
        match self {
            Rows::Exact { dims, values } => values
                .get(index * dims..(index + 1) * dims)
                .map(<[f32]>::to_vec),
            Rows::Bytes(q) => q.row(index),
        }
    }

    /// The dot of `query` with every row, in order (zeros for a query of
    /// another width).
    pub fn dots(&self, query: &[f32]) -> Vec<f32> {
        match self {
            Rows::Exact { dims, values } => dots(values, *dims, query),
            Rows::Bytes(q) => q.dots(query),
        }
    }
}

/// The dot of `query` with each `dims`-wide row of `values`, in order
/// (zeros for a query of another width).
pub fn dots(values: &[f32], dims: usize, query: &[f32]) -> Vec<f32> {
    if dims == 0 || query.len() != dims {
        return vec![0.0; values.len() / dims.max(1)];
    }
    scan(values, query)
}

/// The vector unit this processor's scans are built for: `"AVX-512 VNNI"`,
/// `"AVX2 FMA"` or `"portable"` (what `doctor` reports; the sums are the
/// same on each, see the tests). Its targets are the scans' own: a scan
/// added with other targets must add them here too.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx512vnni",
    "x86_64+avx2+fma"
))]
pub fn vector_unit() -> &'static str {
    use multiversion::target::target_cfg_f;
    // Each clone's answer is fixed when it is built (in the portable one
    // both are `false`, which an `if` chain on them would repeat).
    let vnni = target_cfg_f!(all(target_arch = "x86_64", target_feature = "avx512vnni"));
    let avx2 = target_cfg_f!(all(target_arch = "x86_64", target_feature = "avx2"));
    match (vnni, avx2) {
        (true, _) => "AVX-512 VNNI",
        (false, true) => "AVX2 FMA",
        (false, false) => "portable",
    }
}

/// The dot of `query` with each row of `values` (as wide as `query`), in
/// order, built as [`scan_bytes`] is.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx512vnni",
    "x86_64+avx2+fma"
))]
fn scan(values: &[f32], query: &[f32]) -> Vec<f32> {
    values
        .chunks_exact(query.len().max(1))
        .map(|v| crate::model::dot_inline(query, v))
        .collect()
}

/// Appends `row` as bytes to `out` (its largest value as ±127); returns
/// the scale that gives the values back.
fn quantize_into(row: &[f32], out: &mut Vec<i8>) -> f32 {
    let largest = row
        .iter()
        .filter(|x| x.is_finite())
        .fold(0f32, |m, x| m.max(x.abs()));
    if largest <= f32::MIN_POSITIVE {
        out.extend(std::iter::repeat_n(0i8, row.len()));
        return 0.0;
    }
    let to_byte = 127.0 / largest;
    // `as` saturates (and makes NaN 0): the value is within ±127 anyway.
    out.extend(row.iter().map(|x| (x * to_byte).round() as i8));
    largest / 127.0
}

/// The dot of `q` (a row of bytes, times `q_scale`) with each row of
/// `bytes` (times its scale), in order: a search's pass over every tool,
/// built for the widest vector unit the processor has.
#[multiversion::multiversion(targets(
    "x86_64+avx512f+avx512bw+avx512vl+avx512vnni",
    "x86_64+avx2+fma"
))]
fn scan_bytes(bytes: &[i8], scales: &[f32], q: &[i8], q_scale: f32) -> Vec<f32> {
    bytes
        .chunks_exact(q.len().max(1))
        .zip(scales)
        .map(|(row, scale)| dot_bytes(q, row) as f32 * scale * q_scale)
        .collect()
}

/// The dot of two byte rows. Sixteen running sums so the compiler can keep
/// them in vector registers; a row of 384 bytes sums to at most
/// 384 × 127² (6.2 million), far within `i32`.
#[inline(always)]
fn dot_bytes(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = [0i32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: i32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += i32::from(x[k]) * i32::from(y[k]);
        }
    }
    acc.iter().sum::<i32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{dot, normalize};

    /// Unit vectors with a spread of values, as a model's are.
    fn vectors(count: usize, dims: usize) -> Vec<f32> {
        let mut seed = 0x2545_f491_u32;
        let mut out = Vec::new();
        for _ in 0..count {
            let mut v: Vec<f32> = (0..dims)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    (seed % 2001) as f32 / 1000.0 - 1.0
                })
                .collect();
            normalize(&mut v);
            out.extend(v);
        }
        out
    }

    #[test]
    fn dots_are_close_to_the_exact_ones() {
        let dims = 384;
        let rows = vectors(200, dims);
        let quantized = Quantized::new(&rows, dims);
        assert_eq!(quantized.len(), 200);
        let query = vectors(1, dims);
        let dots = quantized.dots(&query);
        for (row, approx) in rows.chunks_exact(dims).zip(&dots) {
            let exact = dot(&query, row);
            assert!((exact - approx).abs() < 0.004, "{exact} vs {approx}");
        }
        // A row read back is the row, rounded.
        let Some(back) = quantized.row(7) else {
            panic!("no row 7");
        };
        let original = &rows[7 * dims..8 * dims];
        assert!(back.iter().zip(original).all(|(a, b)| (a - b).abs() < 0.01));
        assert!((dot(&back, original) - 1.0).abs() < 1e-3);
    }

    /// Rows as bytes or as computed give the same rows and dots, within
    /// what bytes round off.
    #[test]
    fn rows_either_way_agree() {
        let dims = 64;
        let values = vectors(30, dims);
        let exact = Rows::new(values.clone(), dims, false);
        let bytes = Rows::new(values, dims, true);
        assert_eq!((exact.len(), bytes.len()), (30, 30));
        assert_eq!((exact.dims(), bytes.dims()), (dims, dims));
        let query = vectors(1, dims);
        for (a, b) in exact.dots(&query).iter().zip(bytes.dots(&query)) {
            assert!((a - b).abs() < 0.01, "{a} vs {b}");
        }
        let (Some(a), Some(b)) = (exact.row(29), bytes.row(29)) else {
            panic!("no row 29");
        };
        assert!(a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 0.01));
        assert_eq!(exact.row(30), None);
        // A query of another width meets nothing.
        assert_eq!(exact.dots(&[1.0]), vec![0.0; 30]);
        assert!(Rows::default().is_empty());
    }

    /// The scans run as built for the processor's widest unit: checked
    /// against what the standard library detects, and against
    /// `CEM_EXPECT_VECTOR_UNIT` where `scripts/test` runs these tests on an
    /// emulated processor without AVX-512, then without AVX2 (so that each
    /// build's sums are checked, not only this machine's).
    #[test]
    fn scans_run_as_built_for_the_processor() {
        let unit = vector_unit();
        if let Ok(expected) = std::env::var("CEM_EXPECT_VECTOR_UNIT") {
            assert_eq!(
                unit, expected,
                "the scans were not built for the expected unit"
            );
        }
        #[cfg(target_arch = "x86_64")]
        {
            let detected = if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni")
            {
                "AVX-512 VNNI"
            } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                "AVX2 FMA"
            } else {
                "portable"
            };
            assert_eq!(unit, detected);
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(unit, "portable");
    }

    /// The scans are built for the processor's vector unit (AVX-512 or
    /// AVX2 where there): each must sum exactly as the portable code does,
    /// or one machine would rank otherwise than another.
    #[test]
    fn scans_built_for_the_vector_unit_sum_as_portable_code_does() {
        for dims in [384, 13, 1] {
            let values = vectors(50, dims);
            let query = vectors(1, dims);
            let portable: Vec<f32> = values
                .chunks_exact(dims)
                .map(|row| crate::dot(&query, row))
                .collect();
            let scanned = dots(&values, dims, &query);
            assert_eq!(
                scanned.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                portable.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "width {dims}"
            );
            let quantized = Quantized::new(&values, dims);
            let mut q = Vec::new();
            let q_scale = quantize_into(&query, &mut q);
            let portable: Vec<f32> = quantized
                .bytes
                .chunks_exact(dims)
                .zip(&quantized.scales)
                .map(|(row, scale)| {
                    let sum: i32 = row
                        .iter()
                        .zip(&q)
                        .map(|(a, b)| i32::from(*a) * i32::from(*b))
                        .sum();
                    sum as f32 * scale * q_scale
                })
                .collect();
            assert_eq!(quantized.dots(&query), portable, "width {dims}");
        }
    }

    #[test]
    fn zero_rows_odd_widths_and_wrong_queries() {
        let rows = [0.0, 0.0, 0.0, 0.5, -1.0, 0.25, f32::NAN, 1.0, 0.0];
        let quantized = Quantized::new(&rows, 3);
        assert_eq!(quantized.row(0), Some(vec![0.0, 0.0, 0.0]));
        let dots = quantized.dots(&[0.0, 1.0, 0.0]);
        assert_eq!(dots[0], 0.0);
        assert!((dots[1] + 1.0).abs() < 0.01, "{dots:?}");
        // NaN is no value: the row keeps the rest.
        assert!((dots[2] - 1.0).abs() < 0.01, "{dots:?}");
        assert_eq!(quantized.dots(&[1.0, 0.0]), vec![0.0; 3]);
        assert_eq!(quantized.row(3), None);
        assert!(Quantized::new(&rows, 0).is_empty());
    }
}
