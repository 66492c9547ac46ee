//! Our own replication connection for MariaDB.
//!
//! mysql_async cannot send COM_BINLOG_DUMP with flag 2
//! (BINLOG_SEND_ANNOTATE_ROWS_EVENT), and without it MariaDB never sends the
//! Annotate_rows events that carry the originating SQL. So the dump
//! connection speaks the protocol itself, built from mysql_common's packet
//! types: handshake, native-password authentication, a few `SET`s, register,
//! dump. A reader task then moves event packets into a bounded channel, so
//! the network read overlaps the decoding.

use bytes::BytesMut;
use mysql_common::constants::CapabilityFlags;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{
    AuthPlugin, AuthSwitchRequest, BinlogDumpFlags, ComBinlogDump, ComRegisterSlave,
    HandshakePacket, HandshakeResponse, ServerError,
};
use mysql_common::proto::codec::PacketCodec;
use mysql_common::proto::MySerialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::config::SourceConfig;
use crate::config::PASSWORD_ENV;
use crate::error::{Error, Result};

/// MariaDB's `BINLOG_SEND_ANNOTATE_ROWS_EVENT` dump flag.
const SEND_ANNOTATE_ROWS: u16 = 2;
/// How many batches of packets the reader may run ahead of the decoder.
pub(crate) const READ_AHEAD: usize = 16;
/// A batch closes at this many packets or bytes: one channel message (and
/// at most one wake-up of the other side) per batch instead of per event,
/// which cost a sixth of the CPU in context switches.
pub(crate) const BATCH_PACKETS: usize = 128;
pub(crate) const BATCH_BYTES: usize = 256 * 1024;

/// What a reader hands over: one event as the server sends it — a status
/// byte (0), then header, body and checksum — or the failure that ended the
/// stream. The status byte stays so that no event is copied to drop it.
pub type Packet = std::result::Result<Vec<u8>, ServerFailure>;

/// Packets in stream order; a failure is the last of its batch.
pub type Packets = Vec<Packet>;

/// What ended a binlog stream.
#[derive(Debug, Clone)]
pub enum ServerFailure {
    /// An error packet from the server.
    Server { code: u16, message: String },
    /// A broken connection (or an unreadable binlog file).
    Io(String),
    /// Bytes that are not a valid event.
    Corrupt(String),
}

pub struct Replica {
    stream: TcpStream,
    codec: PacketCodec,
    buf: BytesMut,
    capabilities: CapabilityFlags,
}

impl Replica {
    /// Connects and authenticates.
    pub async fn connect(cfg: &SourceConfig) -> Result<Replica> {
        let addr = format!("{}:{}", cfg.host, cfg.port);
        let stream = tokio::time::timeout(cfg.connect_timeout, TcpStream::connect(&addr))
            .await
            .map_err(|_| {
                Error::Connection(format!(
                    "cannot reach {addr} within {:?}; check source.url and that the server is up",
                    cfg.connect_timeout
                ))
            })?
            .map_err(|e| {
                Error::Connection(format!(
                    "cannot connect to {addr}: {e}; check source.url and that the server is up"
                ))
            })?;
        stream.set_nodelay(true).ok();
        let mut replica = Replica {
            stream,
            codec: PacketCodec::default(),
            buf: BytesMut::with_capacity(64 * 1024),
            capabilities: CapabilityFlags::empty(),
        };
        tokio::time::timeout(cfg.connect_timeout, replica.handshake(cfg))
            .await
            .map_err(|_| {
                Error::Connection(format!(
                    "{addr} did not finish the handshake within {:?}",
                    cfg.connect_timeout
                ))
            })??;
        Ok(replica)
    }

    async fn handshake(&mut self, cfg: &SourceConfig) -> Result<()> {
        let hello = self.read_packet().await.map_err(io_error)?;
        if hello.first() == Some(&0xFF) {
            let (code, message) = server_error(&hello);
            return Err(Error::Connection(format!(
                "{}:{} refused the connection: {message} ({code})",
                cfg.host, cfg.port
            )));
        }
        let handshake: HandshakePacket<'_> = ParseBuf(&hello)
            .parse(())
            .map_err(|e| Error::Connection(format!("bad handshake from the server: {e}")))?;
        let nonce = handshake.nonce();
        let plugin = first_plugin(handshake.auth_plugin());
        let wanted = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_MULTI_RESULTS
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CapabilityFlags::CLIENT_LONG_FLAG;
        self.capabilities = wanted & handshake.capabilities();
        let password = cfg.password.as_deref();
        let data = plugin.gen_data(password, &nonce);
        let mut scramble = Vec::new();
        if let Some(d) = &data {
            d.serialize(&mut scramble);
        }
        let response = HandshakeResponse::new(
            Some(scramble),
            handshake.server_version_parsed().unwrap_or((10, 0, 0)),
            Some(cfg.user.as_bytes()),
            None::<&[u8]>,
            Some(plugin.clone()),
            self.capabilities,
            None,
            16 * 1024 * 1024,
        );
        let mut payload = Vec::new();
        response.serialize(&mut payload);
        // The response continues the server's greeting: sequence id 1.
        self.write_packet(&payload, true).await?;
        let mut reply = self.read_packet().await.map_err(io_error)?;
        if reply.first() == Some(&0xFE) {
            // Auth switch: answer the plugin the server asks for.
            let answer = answer_auth_switch(&reply, password, &cfg.user)?;
            self.write_packet(&answer, true).await?;
            reply = self.read_packet().await.map_err(io_error)?;
        }
        match reply.first() {
            Some(0x00) => Ok(()),
            Some(0xFF) => {
                let (code, message) = server_error(&reply);
                if code == 1045 || code == 1698 {
                    Err(Error::Preflight(format!(
                        "authentication failed for user `{}` at {}:{} ({message}); check the user in source.url and the password in {PASSWORD_ENV} or source.password_file",
                        cfg.user, cfg.host, cfg.port
                    )))
                } else {
                    Err(Error::Connection(format!(
                        "{}:{} refused the replication login: {message} ({code})",
                        cfg.host, cfg.port
                    )))
                }
            }
            _ => Err(unsupported_plugin(&cfg.user, &plugin)),
        }
    }

    /// Runs a statement that returns no rows (`SET ...`).
    pub async fn execute(&mut self, sql: &str) -> Result<()> {
        let mut payload = Vec::with_capacity(sql.len() + 1);
        payload.push(0x03); // COM_QUERY
        payload.extend_from_slice(sql.as_bytes());
        self.write_packet(&payload, false).await?;
        let reply = self.read_packet().await.map_err(io_error)?;
        match reply.first() {
            Some(0x00) => Ok(()),
            Some(0xFF) => {
                let (code, message) = server_error(&reply);
                Err(Error::Connection(format!(
                    "`{sql}` failed: {message} ({code})"
                )))
            }
            _ => Err(Error::Connection(format!(
                "`{sql}` returned rows; expected a plain OK"
            ))),
        }
    }

    /// COM_REGISTER_SLAVE, so the server lists us in SHOW SLAVE HOSTS
    /// under `server_id` and `host`.
    pub async fn register(&mut self, server_id: u32, host: &str) -> Result<()> {
        let mut payload = Vec::new();
        ComRegisterSlave::new(server_id)
            .with_hostname(host.as_bytes())
            .serialize(&mut payload);
        self.write_packet(&payload, false).await?;
        let reply = self.read_packet().await.map_err(io_error)?;
        match reply.first() {
            Some(0x00) => Ok(()),
            _ => {
                let (code, message) = server_error(&reply);
                Err(Error::Connection(format!(
                    "registering as replica {server_id} failed: {message} ({code})"
                )))
            }
        }
    }

    /// Sends COM_BINLOG_DUMP (asking for Annotate_rows events) and hands the
    /// connection to a reader task. An empty `file` with
    /// `@slave_connect_state` set starts from a GTID state.
    pub async fn dump(
        mut self,
        server_id: u32,
        file: &str,
        pos: u64,
    ) -> Result<mpsc::Receiver<Packets>> {
        let mut payload = Vec::new();
        ComBinlogDump::new(server_id)
            .with_pos(u32::try_from(pos).unwrap_or(u32::MAX))
            .with_flags(BinlogDumpFlags::from_bits_retain(SEND_ANNOTATE_ROWS))
            .with_filename(file.as_bytes())
            .serialize(&mut payload);
        self.write_packet(&payload, false).await?;
        let (tx, rx) = mpsc::channel(READ_AHEAD);
        tokio::spawn(self.read_events(tx));
        Ok(rx)
    }

    /// Reads packets and sends them on in batches: a batch is what one
    /// read brought in, so batching adds no wait.
    async fn read_events(mut self, tx: mpsc::Sender<Packets>) {
        loop {
            let read = tokio::select! {
                read = self.read_packet() => read,
                // The stream was dropped (a reconnect or the end of the run):
                // close the connection now, not at the next packet, which a
                // hung server may never send.
                () = tx.closed() => return,
            };
            let mut batch = Vec::new();
            let mut bytes = 0;
            let mut next = read.map(Some);
            let ended = loop {
                let packet = match next {
                    Ok(Some(p)) => p,
                    Ok(None) => break false,
                    Err(e) => {
                        batch.push(Err(ServerFailure::Io(e.to_string())));
                        break true;
                    }
                };
                match packet.first() {
                    Some(0x00) => {
                        bytes += packet.len();
                        batch.push(Ok(packet));
                    }
                    Some(0xFF) => {
                        let (code, message) = server_error(&packet);
                        batch.push(Err(ServerFailure::Server { code, message }));
                        break true;
                    }
                    // EOF: the server ended the dump.
                    _ => break true,
                }
                if batch.len() >= BATCH_PACKETS || bytes >= BATCH_BYTES {
                    break false;
                }
                next = self.buffered_packet();
            };
            if (!batch.is_empty() && tx.send(batch).await.is_err()) || ended {
                return;
            }
        }
    }

    async fn write_packet(&mut self, payload: &[u8], continue_seq: bool) -> Result<()> {
        if !continue_seq {
            self.codec.reset_seq_id();
        }
        let mut out = BytesMut::with_capacity(payload.len() + 4);
        self.codec
            .encode(&mut &payload[..], &mut out)
            .map_err(|e| Error::Connection(format!("cannot frame a packet: {e}")))?;
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| Error::Connection(format!("write to the server failed: {e}")))
    }

    /// A whole packet already read from the socket, if there is one.
    fn buffered_packet(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut packet = Vec::new();
        let whole = self
            .codec
            .decode(&mut self.buf, &mut packet)
            .map_err(std::io::Error::other)?;
        Ok(whole.then_some(packet))
    }

    async fn read_packet(&mut self) -> std::io::Result<Vec<u8>> {
        loop {
            if let Some(packet) = self.buffered_packet()? {
                return Ok(packet);
            }
            self.buf.reserve(64 * 1024);
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
        }
    }
}

/// The plugin of the first login answer. A greeting that names
/// `mysql_clear_password` (a server whose default is a PAM setup) gets a
/// native-password scramble instead: the password itself must never go out
/// unencrypted, and a server that needs another plugin asks with an auth
/// switch, which [`answer_auth_switch`] judges.
fn first_plugin(advertised: Option<AuthPlugin<'_>>) -> AuthPlugin<'static> {
    match advertised.map(|p| p.into_owned()) {
        None | Some(AuthPlugin::MysqlClearPassword) => AuthPlugin::MysqlNativePassword,
        Some(plugin) => plugin,
    }
}

/// The answer to an auth switch request (`0xFE`, plugin name, its data).
/// Only `mysql_native_password` is spoken. `mysql_clear_password` sends the
/// password as it is, readable by anyone on the path; this connection has no
/// TLS, so it is refused rather than answered.
fn answer_auth_switch(packet: &[u8], password: Option<&str>, user: &str) -> Result<Vec<u8>> {
    let switch: AuthSwitchRequest<'_> = ParseBuf(packet)
        .parse(())
        .map_err(|e| Error::Connection(format!("bad auth switch request: {e}")))?;
    let plugin = switch.auth_plugin().clone().into_owned();
    match plugin {
        AuthPlugin::MysqlNativePassword => {}
        AuthPlugin::MysqlClearPassword => {
            return Err(Error::Preflight(format!(
                "the server asks user `{user}` to log in with mysql_clear_password, which would send the password in plain text over an unencrypted connection (sluice's replication connection has no TLS); sluice refuses it: use mysql_native_password for the sluice user (ALTER USER ... IDENTIFIED VIA mysql_native_password USING PASSWORD('...'))"
            )))
        }
        other => return Err(unsupported_plugin(user, &other)),
    }
    let nonce = switch.plugin_data();
    let nonce = nonce.strip_suffix(&[0]).unwrap_or(nonce);
    let mut answer = Vec::new();
    if let Some(d) = plugin.gen_data(password, nonce) {
        d.serialize(&mut answer);
    }
    Ok(answer)
}

fn unsupported_plugin(user: &str, plugin: &AuthPlugin<'_>) -> Error {
    Error::Preflight(format!(
        "user `{user}` authenticates with {}, which sluice's replication connection does not speak; use mysql_native_password for the sluice user (ALTER USER ... IDENTIFIED VIA mysql_native_password USING PASSWORD('...'))",
        String::from_utf8_lossy(plugin.as_bytes())
    ))
}

fn io_error(e: std::io::Error) -> Error {
    Error::Connection(format!("replication connection: {e}"))
}

/// Code and message of an ERR packet.
fn server_error(packet: &[u8]) -> (u16, String) {
    if packet.len() < 3 {
        return (0, "malformed error packet".into());
    }
    let code = u16::from_le_bytes([packet[1], packet[2]]);
    match ParseBuf(&packet[3..]).parse::<ServerError<'_>>((code, true)) {
        Ok(e) => (code, e.message_str().into_owned()),
        Err(_) => (code, String::from_utf8_lossy(&packet[3..]).into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An auth switch request as the server sends it: 0xFE, the plugin name
    /// and a NUL, then the plugin's data (a nonce and a NUL for native
    /// password; nothing for clear password).
    fn switch_request(plugin: &str, data: &[u8]) -> Vec<u8> {
        let mut p = vec![0xFE];
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        p.extend_from_slice(data);
        p
    }

    #[test]
    fn clear_password_switch_is_refused_naming_the_plugin() {
        for data in [&b""[..], b"\0"] {
            let packet = switch_request("mysql_clear_password", data);
            let err = answer_auth_switch(&packet, Some("s3cret"), "repl").unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Preflight(_)), "{text}");
            assert!(text.contains("mysql_clear_password"), "{text}");
            assert!(text.contains("plain text"), "{text}");
            assert!(text.contains("`repl`"), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
        }
    }

    #[test]
    fn native_password_switch_is_answered_with_a_scramble() {
        let nonce: Vec<u8> = (1u8..=20).collect();
        let mut data = nonce.clone();
        data.push(0);
        let packet = switch_request("mysql_native_password", &data);
        let answer = answer_auth_switch(&packet, Some("s3cret"), "repl").unwrap();
        // SHA1(password) XOR SHA1(nonce + SHA1(SHA1(password))): 20 bytes,
        // never the password, and different for another nonce.
        assert_eq!(answer.len(), 20);
        assert!(!answer.windows(6).any(|w| w == b"s3cret"));
        let other = switch_request("mysql_native_password", &[7u8; 20]);
        assert_ne!(
            answer_auth_switch(&other, Some("s3cret"), "repl").unwrap(),
            answer
        );
        // No password: an empty answer.
        assert!(answer_auth_switch(&packet, None, "repl")
            .unwrap()
            .is_empty());
    }

    #[test]
    fn other_plugins_are_refused() {
        let packet = switch_request("client_ed25519", &[1u8; 32]);
        let err = answer_auth_switch(&packet, Some("pw"), "repl").unwrap_err();
        assert!(err.to_string().contains("client_ed25519"), "{err}");
        assert!(answer_auth_switch(&[0xFE], Some("pw"), "repl").is_err());
    }

    #[test]
    fn a_clear_password_greeting_gets_a_native_scramble() {
        assert_eq!(
            first_plugin(Some(AuthPlugin::MysqlClearPassword)),
            AuthPlugin::MysqlNativePassword
        );
        assert_eq!(first_plugin(None), AuthPlugin::MysqlNativePassword);
        assert_eq!(
            first_plugin(Some(AuthPlugin::CachingSha2Password)),
            AuthPlugin::CachingSha2Password
        );
    }
}
