//! Prometheus remote-write (1.0 and 2.0) and remote read, without any I/O: protobuf messages,
//! snappy bodies, validation into a [`crate::sample::WriteBatch`], response encodings and
//! Prometheus' XOR chunk format. The HTTP handlers in `http/` call into this module.

pub mod decode;
pub mod footprint;
pub mod histogram;
pub mod histogram_chunk;
pub mod known_labels;
pub mod metadata;
pub mod proto;
pub mod read;
pub mod scan;
pub mod xor;

#[cfg(test)]
mod tests;

/// Encodes a protobuf message and snappy-compresses it (block format): a remote-write or
/// remote-read body as senders build it.
pub fn snappy_body<M: prost::Message>(msg: &M) -> Vec<u8> {
    read::compress(&msg.encode_to_vec())
}
