//! Images an execution shows, made fit for an answer.
//!
//! Code in the sandbox hands the host image files (`show()`); the host
//! sends each as an MCP image block. This crate takes the bytes as they
//! came (untrusted: agent code wrote them) and gives back a PNG or JPEG
//! that a client and a vision model take:
//! - the type is recognised by the bytes, never by a name or a claim;
//! - PNG and JPEG are decoded within limits (dimensions and memory), so a
//!   small file that claims a huge picture is refused, not allocated;
//! - SVG is drawn without fonts, files or embedded rasters: an `<image>`
//!   or a reference outside the document draws nothing, so an SVG cannot
//!   make the host read a file;
//! - a picture whose longest edge is over the limit is downscaled, and one
//!   over the byte budget is sent as a JPEG, smaller if need be.
//!
//! What was done is said in [`Picture::changed`], for the answer to tell.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, ImageReader, codecs::jpeg::JpegEncoder};
use resvg::{tiny_skia, usvg};

/// The most pixels along one edge of a picture this crate decodes.
const MAX_DECODED_EDGE: u32 = 20_000;
/// The most memory one decode may take: a 24-megapixel photo (96 MiB as
/// RGBA) fits; a small file that claims more is refused, as several
/// executions may decode at once on the host.
const MAX_DECODE_ALLOC: u64 = 128 << 20;
/// The smallest edge a picture is shrunk to while fitting a byte budget.
const MIN_EDGE: u32 = 64;
/// The quality of a JPEG made to fit the budget.
const JPEG_QUALITY: u8 = 85;

/// What an image may be once sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest edge, in pixels.
    pub max_edge: u32,
    /// The most bytes of the encoded image.
    pub max_bytes: usize,
}

/// The kinds of image taken, by their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Png,
    Jpeg,
    Svg,
}

impl Kind {
    /// The kind of `bytes`: PNG and JPEG by their signature, SVG by an
    /// `<svg` element near the start of a text.
    pub fn of(bytes: &[u8]) -> Option<Kind> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            return Some(Kind::Png);
        }
        if bytes.starts_with(b"\xff\xd8\xff") {
            return Some(Kind::Jpeg);
        }
        let head = &bytes[..bytes.len().min(4096)];
        let text = String::from_utf8_lossy(head).to_ascii_lowercase();
        let start = text.trim_start_matches(['\u{feff}', ' ', '\t', '\r', '\n']);
        let markup = start.starts_with('<');
        (markup && text.contains("<svg")).then_some(Kind::Svg)
    }

    pub fn mime(self) -> &'static str {
        match self {
            Kind::Png => "image/png",
            Kind::Jpeg => "image/jpeg",
            Kind::Svg => "image/svg+xml",
        }
    }
}

/// An image ready for an answer.
#[derive(Debug, Clone)]
pub struct Picture {
    /// `image/png` or `image/jpeg`.
    pub mime: &'static str,
    pub data: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// What was done to fit the limits ("downscaled from 4000×3000", "sent
    /// as JPEG to fit 1048576 bytes"), if anything.
    pub changed: Option<String>,
}

impl Picture {
    /// What the picture costs a model, by the published rule for images:
    /// about one token per 750 pixels.
    pub fn tokens(&self) -> u64 {
        (u64::from(self.width) * u64::from(self.height)).div_ceil(750)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    #[error("it is not a PNG, JPEG or SVG image (save it as PNG and show that)")]
    NotAnImage,
    #[error("it could not be read as {kind}: {why}")]
    Broken { kind: &'static str, why: String },
    #[error(
        "it is {width}×{height} pixels, over the {MAX_DECODED_EDGE} pixels an edge may have; save it smaller"
    )]
    TooLarge { width: u32, height: u32 },
    #[error("it does not fit in {max} bytes even at {MIN_EDGE} pixels")]
    NoFit { max: usize },
}

/// `bytes` made fit for `limits`. A PNG or JPEG already within them is
/// sent as it came (checked, not re-encoded).
pub fn prepare(bytes: &[u8], limits: Limits) -> Result<Picture, PictureError> {
    let kind = Kind::of(bytes).ok_or(PictureError::NotAnImage)?;
    let max_edge = limits.max_edge.max(MIN_EDGE);
    let image = match kind {
        Kind::Svg => {
            let (image, natural) = draw_svg(bytes, max_edge)?;
            let changed = (natural.0.max(natural.1) > max_edge)
                .then(|| format!("drawn from SVG at {}×{}", image.width(), image.height()));
            return fit(image, ImageFormat::Png, limits.max_bytes, changed);
        }
        Kind::Png | Kind::Jpeg => {
            let format = if kind == Kind::Png {
                ImageFormat::Png
            } else {
                ImageFormat::Jpeg
            };
            // The header's claim, read without the decode's limits, so a
            // claim over them is named as such.
            let (width, height) = ImageReader::with_format(Cursor::new(bytes), format)
                .into_dimensions()
                .map_err(|e| broken(kind, e))?;
            if width > MAX_DECODED_EDGE || height > MAX_DECODED_EDGE {
                return Err(PictureError::TooLarge { width, height });
            }
            let image = reader(bytes, format)
                .decode()
                .map_err(|e| broken(kind, e))?;
            if width.max(height) <= max_edge && bytes.len() <= limits.max_bytes {
                return Ok(Picture {
                    mime: kind.mime(),
                    data: bytes.to_vec(),
                    width,
                    height,
                    changed: None,
                });
            }
            (image, format)
        }
    };
    let (image, format) = image;
    let (width, height) = (image.width(), image.height());
    let (image, changed) = if width.max(height) > max_edge {
        let smaller = image.resize(max_edge, max_edge, image::imageops::FilterType::Triangle);
        let note = format!(
            "downscaled from {width}×{height} to {}×{}",
            smaller.width(),
            smaller.height()
        );
        (smaller, Some(note))
    } else {
        (image, None)
    };
    fit(image, format, limits.max_bytes, changed)
}

fn reader(bytes: &[u8], format: ImageFormat) -> ImageReader<Cursor<&[u8]>> {
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(MAX_DECODED_EDGE);
    limits.max_image_height = Some(MAX_DECODED_EDGE);
    limits.max_alloc = Some(MAX_DECODE_ALLOC);
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    reader.limits(limits);
    reader
}

fn broken(kind: Kind, e: image::ImageError) -> PictureError {
    PictureError::Broken {
        kind: kind.mime(),
        why: e.to_string(),
    }
}

/// `image` encoded in `format` (PNG stays PNG unless it is over the
/// budget), then as JPEG, then smaller, until it fits `max_bytes`.
fn fit(
    mut image: DynamicImage,
    format: ImageFormat,
    max_bytes: usize,
    mut changed: Option<String>,
) -> Result<Picture, PictureError> {
    let first = encode(&image, format)?;
    if first.len() <= max_bytes {
        return Ok(picture(&image, format, first, changed));
    }
    let original = (image.width(), image.height());
    loop {
        let data = encode(&image, ImageFormat::Jpeg)?;
        if data.len() <= max_bytes {
            let how = if (image.width(), image.height()) == original {
                format!("sent as JPEG to fit {max_bytes} bytes")
            } else {
                format!(
                    "sent as JPEG at {}×{} to fit {max_bytes} bytes",
                    image.width(),
                    image.height()
                )
            };
            changed = Some(match changed {
                Some(before) => format!("{before}, {how}"),
                None => how,
            });
            return Ok(picture(&image, ImageFormat::Jpeg, data, changed));
        }
        let edge = image.width().max(image.height());
        if edge <= MIN_EDGE {
            return Err(PictureError::NoFit { max: max_bytes });
        }
        let next = (edge * 3 / 4).max(MIN_EDGE);
        image = image.resize(next, next, image::imageops::FilterType::Triangle);
    }
}

fn picture(
    image: &DynamicImage,
    format: ImageFormat,
    data: Vec<u8>,
    changed: Option<String>,
) -> Picture {
    Picture {
        mime: if format == ImageFormat::Jpeg {
            "image/jpeg"
        } else {
            "image/png"
        },
        data,
        width: image.width(),
        height: image.height(),
        changed,
    }
}

fn encode(image: &DynamicImage, format: ImageFormat) -> Result<Vec<u8>, PictureError> {
    let mut out = Vec::new();
    let done = if format == ImageFormat::Jpeg {
        // JPEG has no alpha: transparent parts come out as they are drawn
        // over black, so flatten onto white first (a figure's background).
        let rgb = flatten(image);
        JpegEncoder::new_with_quality(&mut out, JPEG_QUALITY).encode_image(&rgb)
    } else {
        image.write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
    };
    done.map_err(|e| PictureError::Broken {
        kind: "an encoded image",
        why: e.to_string(),
    })?;
    Ok(out)
}

fn flatten(image: &DynamicImage) -> image::RgbImage {
    let rgba = image.to_rgba8();
    let mut rgb = image::RgbImage::new(rgba.width(), rgba.height());
    for (to, from) in rgb.pixels_mut().zip(rgba.pixels()) {
        let a = u16::from(from[3]);
        for i in 0..3 {
            let c = u16::from(from[i]);
            to[i] = ((c * a + 255 * (255 - a)) / 255) as u8;
        }
    }
    rgb
}

/// The SVG drawn with its longest edge at most `max_edge`, and its own
/// size. Nothing outside the document is read: `<image>` references draw
/// nothing.
fn draw_svg(bytes: &[u8], max_edge: u32) -> Result<(DynamicImage, (u32, u32)), PictureError> {
    let options = usvg::Options {
        image_href_resolver: usvg::ImageHrefResolver {
            resolve_data: Box::new(|_, _, _| None),
            resolve_string: Box::new(|_, _| None),
        },
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_data(bytes, &options).map_err(|e| PictureError::Broken {
        kind: "image/svg+xml",
        why: e.to_string(),
    })?;
    let size = tree.size();
    let natural = (size.width().ceil() as u32, size.height().ceil() as u32);
    let longest = size.width().max(size.height());
    let scale = if longest > max_edge as f32 {
        max_edge as f32 / longest
    } else {
        1.0
    };
    let width = ((size.width() * scale).ceil() as u32).clamp(1, max_edge);
    let height = ((size.height() * scale).ceil() as u32).clamp(1, max_edge);
    let mut pixmap = tiny_skia::Pixmap::new(width, height).ok_or(PictureError::Broken {
        kind: "image/svg+xml",
        why: format!("it has no drawable size ({width}×{height})"),
    })?;
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(scale, scale),
        &mut pixmap.as_mut(),
    );
    // The pixmap is premultiplied; on an opaque white fill that is the
    // colour itself.
    let rgba =
        image::RgbaImage::from_raw(width, height, pixmap.take()).ok_or(PictureError::Broken {
            kind: "image/svg+xml",
            why: "the drawing has the wrong size".into(),
        })?;
    Ok((DynamicImage::ImageRgba8(rgba), natural))
}

#[cfg(test)]
mod tests;
