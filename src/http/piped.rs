//! Responses piped from a blocking reader: the reader sends pieces through a bounded channel
//! as it produces them, one series in memory at a time, and the client reads them as they come.
//! Used by export (JSON lines) and streamed remote read (XOR chunk frames).

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use tokio::sync::mpsc;

use super::error::ApiError;
use crate::storage::StorageError;

/// Pieces buffered between the storage reader and the socket.
pub const BUFFER: usize = 16;

/// A sender for the reader and its receiving end.
pub type Pipe = (mpsc::Sender<Result<Bytes, StorageError>>, mpsc::Receiver<Result<Bytes, StorageError>>);

/// A new pipe of [`BUFFER`] pieces.
pub fn pipe() -> Pipe {
    mpsc::channel(BUFFER)
}

/// The response streaming what arrives on `rx`. A failure before the first piece is an
/// ordinary error response; a later one, when the status is already sent, fails the stream, so
/// the response ends without its final chunk and the client sees a truncated transfer instead of
/// a short but clean one.
///
/// # Errors
/// The reader's first error, if it comes before any piece.
pub async fn response(
    content_type: &'static str,
    mut rx: mpsc::Receiver<Result<Bytes, StorageError>>,
) -> Result<Response, ApiError> {
    let first = match rx.recv().await {
        Some(Err(e)) => return Err(e.into()),
        other => other,
    };
    let stream = futures_util::stream::unfold((first, rx), |(pending, mut rx)| async move {
        let item = match pending {
            Some(item) => item,
            None => rx.recv().await?,
        };
        Some((item.map_err(std::io::Error::other), (None, rx)))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::Internal(e.to_string()))
}
