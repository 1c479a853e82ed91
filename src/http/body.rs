//! Reading request bodies under a size limit, with `Content-Encoding: gzip` support.

use std::io::Read;

use axum::body::Body;
use axum::http::{header, HeaderMap};
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

use super::admission::Ticket;
use super::body_deadline;
use super::error::ApiError;

/// Reads the whole body, failing with 413 when it exceeds `limit` bytes.
///
/// An oversized body is still drained (discarded) up to twice the limit before answering, so an
/// HTTP/1.1 client that is busy sending gets the 413 instead of a connection reset; a body
/// declared larger than that is refused at once.
///
/// # Errors
/// [`ApiError::TooLarge`], [`ApiError::BodyTimeout`] past `--body-read-timeout`, or
/// [`ApiError::BadData`] if the client aborts mid-body.
pub async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ApiError> {
    read_admitted(headers, body, limit, None).await
}

/// [`read_limited`] for a write request: the body's bytes are reserved in `ticket` before they
/// are buffered (the declared `Content-Length` up front, a chunked body as it arrives). When
/// the budget runs out, what was buffered is freed and the rest of the body is drained like an
/// oversized one, so the client reads the 429 instead of a reset connection.
///
/// # Errors
/// As [`read_limited`], and [`ApiError::Overloaded`] when the write budget is exhausted.
pub async fn read_admitted(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    mut ticket: Option<&mut Ticket>,
) -> Result<Bytes, ApiError> {
    let drain_cap = limit.saturating_mul(2) as u64;
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > drain_cap) {
        return Err(ApiError::TooLarge { limit });
    }
    let mut refused: Option<ApiError> = None;
    let mut reserved = 0usize;
    if let (Some(t), Some(n)) = (ticket.as_deref_mut(), declared) {
        // Never more than the limit: anything beyond it is drained, not buffered.
        let want = usize::try_from(n).unwrap_or(limit).min(limit);
        match t.reserve(want) {
            Ok(()) => reserved = want,
            Err(e) => refused = Some(e),
        }
    }
    let mut body = body;
    // Sized once from the reservation: growing by doubling would briefly hold twice the body.
    let mut buf = BytesMut::with_capacity(if refused.is_none() { reserved } else { 0 });
    let mut seen: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| match body_deadline::timed_out(&e) {
            Some(t) => ApiError::BodyTimeout(t.to_string()),
            None => ApiError::BadData(format!("reading request body: {e}")),
        })?;
        let Ok(data) = frame.into_data() else { continue };
        seen += data.len() as u64;
        if seen > drain_cap {
            break;
        }
        if seen > limit as u64 || refused.is_some() {
            continue;
        }
        if let Some(t) = ticket.as_deref_mut() {
            let need = buf.len() + data.len();
            if need > reserved {
                // Grow in steps so a chunked body does not reserve per frame.
                let grow = (need - reserved).max(64 << 10).min(limit - reserved);
                if let Err(e) = t.reserve(grow) {
                    refused = Some(e);
                    buf = BytesMut::new();
                    continue;
                }
                reserved += grow;
            }
        }
        buf.extend_from_slice(&data);
    }
    if seen > limit as u64 {
        return Err(ApiError::TooLarge { limit });
    }
    if let Some(e) = refused {
        return Err(e);
    }
    Ok(buf.freeze())
}

/// Reads and discards up to `cap` bytes of a body that will not be used (a request refused
/// before it was read), so the client gets the answer rather than a reset connection.
pub async fn discard(body: Body, cap: usize) {
    let mut body = body;
    let mut seen = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen > cap {
                return;
            }
        }
    }
}

/// The body's content coding, limited to the ones saltdb decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// No coding.
    Identity,
    /// gzip.
    Gzip,
}

/// Reads `Content-Encoding`.
///
/// # Errors
/// [`ApiError::UnsupportedMedia`] for a coding other than identity or gzip.
pub fn coding(headers: &HeaderMap) -> Result<Coding, ApiError> {
    match headers.get(header::CONTENT_ENCODING).map(|v| v.to_str().map(str::trim)) {
        None => Ok(Coding::Identity),
        Some(Ok(v)) if v.is_empty() || v.eq_ignore_ascii_case("identity") => Ok(Coding::Identity),
        Some(Ok(v)) if v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip") => Ok(Coding::Gzip),
        Some(other) => Err(ApiError::UnsupportedMedia(format!(
            "unsupported Content-Encoding {:?}: use gzip or none",
            other.unwrap_or("<not text>")
        ))),
    }
}

/// Decompresses a gzip body, failing with 413 when the output would exceed `limit` (so a small
/// gzip bomb cannot expand without bound).
///
/// # Errors
/// [`ApiError::TooLarge`] or [`ApiError::BadData`] for a corrupt stream.
pub fn gunzip_limited(compressed: &[u8], limit: usize) -> Result<Bytes, ApiError> {
    let mut out = Vec::new();
    let mut decoder = flate2::read::MultiGzDecoder::new(compressed).take(limit as u64 + 1);
    decoder.read_to_end(&mut out).map_err(|e| ApiError::BadData(format!("invalid gzip body: {e}")))?;
    if out.len() > limit {
        return Err(ApiError::TooLarge { limit });
    }
    Ok(Bytes::from(out))
}

/// Reads a body under `limit`, decoding gzip when the request says so; with a `ticket`, the
/// body and its decoded form are reserved in the write budget.
///
/// # Errors
/// As [`read_admitted`], [`coding`] and [`gunzip_limited`].
pub async fn read_decoded(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    mut ticket: Option<&mut Ticket>,
) -> Result<Bytes, ApiError> {
    let coding = coding(headers)?;
    let raw = read_admitted(headers, body, limit, ticket.as_deref_mut()).await?;
    match coding {
        Coding::Identity => Ok(raw),
        Coding::Gzip => {
            let plain = gunzip_limited(&raw, limit)?;
            if let Some(t) = ticket {
                t.reserve(plain.len())?;
            }
            Ok(plain)
        }
    }
}
