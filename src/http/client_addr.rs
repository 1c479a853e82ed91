//! The client's address, recorded per connection so handlers can name who sent a request (the
//! slow-query log does). The accept loop (`connections.rs`) puts it in every request's
//! extensions as `ConnectInfo<ClientAddr>`; handlers read it as
//! `Option<Extension<ConnectInfo<ClientAddr>>>` (absent when a router is driven without a
//! socket, as in-process tests do).

use std::net::SocketAddr;

/// The remote address of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
