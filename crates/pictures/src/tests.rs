use super::*;

type R = Result<(), Box<dyn std::error::Error>>;

const LIMITS: Limits = Limits {
    max_edge: 1568,
    max_bytes: 1 << 20,
};

fn png(width: u32, height: u32, noisy: bool) -> Vec<u8> {
    let mut seed = 0x2545_f491_u32;
    let image = image::RgbImage::from_fn(width, height, |x, y| {
        if noisy {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let [a, b, c, _] = seed.to_le_bytes();
            image::Rgb([a, b, c])
        } else {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 90])
        }
    });
    let mut out = Vec::new();
    DynamicImage::ImageRgb8(image)
        .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
        .unwrap_or_default();
    out
}

#[test]
fn a_picture_within_the_limits_goes_as_it_came() -> R {
    let bytes = png(640, 480, false);
    let p = prepare(&bytes, LIMITS)?;
    assert_eq!((p.mime, p.width, p.height), ("image/png", 640, 480));
    assert_eq!(p.data, bytes);
    assert!(p.changed.is_none());
    assert_eq!(p.tokens(), 410);
    Ok(())
}

#[test]
fn a_wide_picture_is_downscaled_to_the_longest_edge() -> R {
    let p = prepare(&png(3136, 1000, false), LIMITS)?;
    assert_eq!((p.mime, p.width, p.height), ("image/png", 1568, 500));
    assert_eq!(
        p.changed.as_deref(),
        Some("downscaled from 3136×1000 to 1568×500")
    );
    let back = image::load_from_memory(&p.data)?;
    assert_eq!((back.width(), back.height()), (1568, 500));
    Ok(())
}

#[test]
fn a_picture_over_the_byte_budget_becomes_a_jpeg_that_fits() -> R {
    let bytes = png(1000, 1000, true);
    assert!(bytes.len() > 1 << 20, "noise does not compress");
    let p = prepare(&bytes, LIMITS)?;
    assert_eq!(p.mime, "image/jpeg");
    assert!(p.data.len() <= 1 << 20);
    assert!(p.data.starts_with(b"\xff\xd8\xff"));
    assert!(
        p.changed.as_deref().is_some_and(|c| c.contains("JPEG")),
        "{:?}",
        p.changed
    );
    // A budget too small even for a JPEG shrinks the picture further.
    let tight = Limits {
        max_edge: 1568,
        max_bytes: 60_000,
    };
    let p = prepare(&bytes, tight)?;
    assert!(p.data.len() <= 60_000 && p.width < 1000, "{}", p.width);
    Ok(())
}

/// A 4×4 PNG whose header claims `width`×`height`, with the header's
/// checksum made right, so only the claimed size can stop it.
fn claiming(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = png(4, 4, false);
    bytes[16..20].copy_from_slice(&width.to_be_bytes());
    bytes[20..24].copy_from_slice(&height.to_be_bytes());
    // CRC-32 (IEEE) over the chunk's type and data: bytes 12..29.
    let mut crc = !0u32;
    for byte in &bytes[12..29] {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    bytes[29..33].copy_from_slice(&(!crc).to_be_bytes());
    bytes
}

#[test]
fn a_header_claiming_a_huge_picture_is_refused_before_decoding() -> R {
    // 100000×100000: 30 GB decoded.
    let Err(err) = prepare(&claiming(100_000, 100_000), LIMITS) else {
        return Err("a 100000-pixel PNG was taken".into());
    };
    assert!(matches!(err, PictureError::TooLarge { .. }), "{err}");
    // 8000×8000 is within the edge, not within the memory a decode may take (192 MB as RGB).
    let Err(err) = prepare(&claiming(8000, 8000), LIMITS) else {
        return Err("an 8000×8000 PNG was decoded".into());
    };
    assert!(matches!(err, PictureError::Broken { .. }), "{err}");
    assert!(err.to_string().contains("limit"), "{err}");
    Ok(())
}

#[test]
fn bytes_that_are_no_picture_are_refused_by_what_they_are() -> R {
    let Err(err) = prepare(b"GIF89a....", LIMITS) else {
        return Err("a GIF was taken".into());
    };
    assert!(matches!(err, PictureError::NotAnImage));
    let mut cut = png(64, 64, false);
    cut.truncate(cut.len() / 2);
    assert!(matches!(
        prepare(&cut, LIMITS),
        Err(PictureError::Broken { .. })
    ));
    assert_eq!(
        Kind::of(b"\xef\xbb\xbf  <?xml version='1.0'?><svg/>"),
        Some(Kind::Svg)
    );
    assert_eq!(Kind::of(b"<html><p>no svg</p></html>"), None);
    Ok(())
}

const SVG_RED: &str = r##"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100">
<rect x="0" y="0" width="100" height="100" fill="#ff0000"/></svg>"##;

#[test]
fn an_svg_is_drawn_as_a_png() -> R {
    let p = prepare(SVG_RED.as_bytes(), LIMITS)?;
    assert_eq!((p.mime, p.width, p.height), ("image/png", 200, 100));
    let back = image::load_from_memory(&p.data)?.to_rgb8();
    assert_eq!(back.get_pixel(50, 50).0, [255, 0, 0]);
    assert_eq!(back.get_pixel(150, 50).0, [255, 255, 255]);
    Ok(())
}

#[test]
fn a_large_svg_is_drawn_at_the_longest_edge_without_its_size_being_allocated() -> R {
    let huge = r#"<svg xmlns="http://www.w3.org/2000/svg" width="400000" height="100000">
<rect width="400000" height="100000" fill="blue"/></svg>"#;
    let p = prepare(huge.as_bytes(), LIMITS)?;
    assert_eq!((p.width, p.height), (1568, 392));
    assert!(p.changed.is_some());
    Ok(())
}

#[test]
fn an_svg_reads_no_file_of_the_host() -> R {
    // /dev/zero never ends: a renderer that loaded it would not return.
    let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="50" height="50">
<image href="/dev/zero" width="50" height="50"/>
<image xlink:href="/etc/hostname" width="50" height="50"/>
<image href="data:image/svg+xml;base64,PHN2Zy8+" width="50" height="50"/></svg>"#;
    let p = prepare(svg.as_bytes(), LIMITS)?;
    let back = image::load_from_memory(&p.data)?.to_rgb8();
    assert!(back.pixels().all(|px| px.0 == [255, 255, 255]));
    Ok(())
}
