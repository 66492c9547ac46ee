//! Our own replication connection for MariaDB.
//!
//! mysql_async cannot send COM_BINLOG_DUMP with flag 2
//! (BINLOG_SEND_ANNOTATE_ROWS_EVENT), and without it MariaDB never sends the
//! Annotate_rows events that carry the originating SQL. So the dump
//! connection speaks the protocol itself, built from mysql_common's packet
//! types: handshake, TLS ([`super::tls`]), authentication ([`super::auth`]),
//! a few `SET`s, register, dump. A reader task then moves event packets into a bounded channel, so
//! the network read overlaps the decoding.

use bytes::BytesMut;
use mysql_common::constants::CapabilityFlags;
use mysql_common::io::ParseBuf;
use mysql_common::packets::{
    BinlogDumpFlags, ComBinlogDump, ComRegisterSlave, HandshakePacket, HandshakeResponse,
    ServerError, SslRequest,
};
use mysql_common::proto::codec::PacketCodec;
use mysql_common::proto::MySerialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::client::TlsStream;

use super::auth::{Login, Step};
use super::tls;
use crate::config::PASSWORD_ENV;
use crate::config::{SourceConfig, TlsMode};
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

/// The collation our connection asks for in the TLS request (the handshake
/// response names its own): utf8mb4_general_ci.
const UTF8MB4_GENERAL_CI: u8 = 45;

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
    stream: Wire,
    codec: PacketCodec,
    buf: BytesMut,
    capabilities: CapabilityFlags,
}

/// The socket, plain or encrypted (`[source] tls`).
enum Wire {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// Between the two, while the TLS handshake runs.
    Upgrading,
}

impl Wire {
    async fn read_buf(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read_buf(buf).await,
            Wire::Tls(s) => s.read_buf(buf).await,
            Wire::Upgrading => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }

    async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Wire::Plain(s) => s.write_all(bytes).await,
            Wire::Tls(s) => {
                s.write_all(bytes).await?;
                // rustls holds written records until flushed.
                s.flush().await
            }
            Wire::Upgrading => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
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
            stream: Wire::Plain(stream),
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
        let wanted = CapabilityFlags::CLIENT_PROTOCOL_41
            | CapabilityFlags::CLIENT_SECURE_CONNECTION
            | CapabilityFlags::CLIENT_LONG_PASSWORD
            | CapabilityFlags::CLIENT_TRANSACTIONS
            | CapabilityFlags::CLIENT_MULTI_RESULTS
            | CapabilityFlags::CLIENT_PLUGIN_AUTH
            | CapabilityFlags::CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
            | CapabilityFlags::CLIENT_LONG_FLAG;
        self.capabilities = wanted & handshake.capabilities();
        let offers_tls = handshake
            .capabilities()
            .contains(CapabilityFlags::CLIENT_SSL);
        let secure = match (cfg.tls.mode, offers_tls) {
            (TlsMode::Disabled, _) | (TlsMode::Preferred, false) => false,
            (_, true) => true,
            (mode, false) => {
                return Err(Error::Preflight(format!(
                    "{}:{} does not offer TLS, but source.tls = \"{}\"; enable TLS on the server (ssl_cert, ssl_key) or set source.tls = \"preferred\"",
                    cfg.host,
                    cfg.port,
                    mode.name()
                )))
            }
        };
        let max_packet = 16 * 1024 * 1024;
        if secure {
            self.capabilities |= CapabilityFlags::CLIENT_SSL;
            let mut request = Vec::new();
            SslRequest::new(self.capabilities, max_packet, UTF8MB4_GENERAL_CI)
                .serialize(&mut request);
            self.write_packet(&request, true).await?;
            self.start_tls(cfg).await?;
        }
        let password = cfg.password.as_deref();
        let mut login = Login::new(
            &cfg.user,
            password,
            secure,
            handshake.auth_plugin(),
            &handshake.nonce(),
        );
        let response = HandshakeResponse::new(
            Some(login.first_answer()),
            handshake.server_version_parsed().unwrap_or((10, 0, 0)),
            Some(cfg.user.as_bytes()),
            None::<&[u8]>,
            Some(login.plugin().clone()),
            self.capabilities,
            None,
            max_packet,
        );
        let mut payload = Vec::new();
        response.serialize(&mut payload);
        // The response continues the server's greeting (and the TLS request).
        self.write_packet(&payload, true).await?;
        loop {
            let reply = self.read_packet().await.map_err(io_error)?;
            if reply.first() == Some(&0xFF) {
                let (code, message) = server_error(&reply);
                return Err(if code == 1045 || code == 1698 {
                    Error::Preflight(format!(
                        "authentication failed for user `{}` at {}:{} ({message}); check the user in source.url and the password in {PASSWORD_ENV} or source.password_file{}",
                        cfg.user, cfg.host, cfg.port, super::tls_hint(cfg)
                    ))
                } else {
                    Error::Connection(format!(
                        "{}:{} refused the replication login: {message} ({code})",
                        cfg.host, cfg.port
                    ))
                });
            }
            match login.next(&reply)? {
                Step::Done => return Ok(()),
                Step::Read => {}
                Step::Send(answer) => self.write_packet(&answer, true).await?,
            }
        }
    }

    /// Turns the socket into a TLS stream, checking the server's
    /// certificate as `source.tls` says.
    async fn start_tls(&mut self, cfg: &SourceConfig) -> Result<()> {
        if !self.buf.is_empty() {
            return Err(Error::Connection(
                "the server sent data before the TLS handshake".into(),
            ));
        }
        let connector = tls::connector(&cfg.tls)?;
        let name = tls::server_name(&cfg.host)?;
        let Wire::Plain(plain) = std::mem::replace(&mut self.stream, Wire::Upgrading) else {
            return Err(Error::Connection("TLS started twice".into()));
        };
        let secure = connector.connect(name, plain).await.map_err(|e| {
            tls::handshake_error(&format!("{}:{}", cfg.host, cfg.port), cfg.tls.mode, &e)
        })?;
        self.stream = Wire::Tls(Box::new(secure));
        Ok(())
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
