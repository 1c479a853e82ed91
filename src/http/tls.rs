//! HTTPS: `--tls-cert` and `--tls-key` (PEM) make the server speak TLS 1.2/1.3 (rustls) on its
//! one port.
//!
//! Handshakes run in each connection's own task (`connections.rs`), within the header read
//! timeout, so a client that connects and says nothing cannot hold up the accept loop; a failed
//! handshake is logged at debug level and dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// Where the certificate chain and key are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{what} {path}: {reason}")]
    File {
        /// "certificate" or "key".
        what: &'static str,
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// rustls refused the pair (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn file_error(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError::File { what, path: path.display().to_string(), reason: reason.to_string() }
}

/// Builds the acceptor from the PEM files (HTTP/1.1 only, like the plain server).
///
/// # Errors
/// [`TlsError`] naming the file and the problem.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| file_error("certificate", &files.cert, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error("certificate", &files.cert, e))?;
    if certs.is_empty() {
        return Err(file_error("certificate", &files.cert, "no CERTIFICATE block found"));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error("key", &files.key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
