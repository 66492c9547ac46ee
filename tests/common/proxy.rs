//! A fault-injecting HTTP/1.1 proxy in front of moto_server. Sluice's S3
//! client talks to it (`AWS_ENDPOINT_URL`), the test's own client talks to
//! moto directly. Rules, switchable while sluice runs, pick requests by
//! method and path and make them fail the ways a network and a store fail:
//! the answer lost after the store acted on the request, an answer that is
//! not HTTP, a 5xx/4xx without forwarding, a stall past the client timeout.
//! Every exchange is logged in order, so a test can prove what the store saw.
//!
//! One request per connection: every answer says `Connection: close`, so a
//! fault never hits a request that happened to share a pooled connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What happens to a request a rule picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward it, wait for the store's answer, close the connection
    /// without passing the answer on: the client cannot tell whether the
    /// request took effect (object_store resends it).
    Drop,
    /// Forward it, then answer bytes that are not HTTP: the answer is lost
    /// and object_store does not resend (an unknown transport error).
    Garbage,
    /// Answer this status with an S3 error body, without forwarding.
    Status(u16),
    /// Forward it, then hold the connection without an answer this long
    /// (past the client's timeout), then close it.
    Stall(Duration),
}

/// Picks requests: `method` (empty: any) and a substring of the path; of the
/// matching requests, number i (from 0) is hit when `i % period < burst`,
/// up to `limit` hits in all.
#[derive(Clone, Debug)]
pub struct Rule {
    pub method: &'static str,
    pub path_contains: &'static str,
    pub period: usize,
    pub burst: usize,
    pub limit: usize,
    pub fault: Fault,
    seen: usize,
    hits: usize,
}

impl Rule {
    /// Every `period`-th matching request (the first one included).
    pub fn every(
        method: &'static str,
        path_contains: &'static str,
        period: usize,
        fault: Fault,
    ) -> Rule {
        Rule {
            method,
            path_contains,
            period,
            burst: 1,
            limit: usize::MAX,
            fault,
            seen: 0,
            hits: 0,
        }
    }

    /// Runs of `burst` matching requests in a row, every `period`.
    pub fn bursts(mut self, burst: usize) -> Rule {
        self.burst = burst;
        self
    }

    /// At most `limit` hits.
    pub fn limit(mut self, limit: usize) -> Rule {
        self.limit = limit;
        self
    }
}

/// One request as the proxy handled it.
#[derive(Clone, Debug)]
pub struct Exchange {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub query: String,
    /// The keys a bulk delete (`POST ?delete`) names.
    pub deletes: Vec<String>,
    pub fault: Option<Fault>,
    /// The store's status, when the request was forwarded and answered.
    pub status: Option<u16>,
    /// Clock readings: when the request went to the store, when its answer
    /// came back (0: never). One clock for all exchanges, so they order them.
    pub sent: u64,
    pub answered: u64,
    /// When the answer came back, in microseconds of the proxy's clock.
    pub answered_us: u64,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    log: Vec<Exchange>,
    /// Added to every forwarded request: a store that answers slowly.
    delay: Duration,
}

pub struct FaultProxy {
    port: u16,
    state: Arc<Mutex<State>>,
    _runtime: tokio::runtime::Runtime,
}

static CLOCK: AtomicU64 = AtomicU64::new(1);

fn tick() -> u64 {
    CLOCK.fetch_add(1, Ordering::SeqCst)
}

/// Microseconds since the first call: the time of an answer.
fn micros() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_micros() as u64
}

/// Answers that came back within this long of the last answer before a
/// request went out may each be what it waited for.
const TRIGGER_WINDOW_US: u64 = 5_000;

impl FaultProxy {
    /// A proxy on a free loopback port forwarding to 127.0.0.1:`upstream`.
    pub fn start(upstream: u16) -> FaultProxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("proxy runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = Arc::clone(&state);
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, upstream, Arc::clone(&shared)));
            }
        });
        FaultProxy {
            port,
            state,
            _runtime: runtime,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Replaces the rules. A request counts for every rule it matches until
    /// one hits it.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        self.state.lock().unwrap().rules = rules;
    }

    /// Points `sluice` at this proxy, with a client timeout of `timeout`
    /// (object_store's `AWS_TIMEOUT`; a stall must outlast it).
    pub fn route(&self, sluice: &mut super::Sluice, timeout: &str) {
        sluice
            .env
            .retain(|(k, _)| k != "AWS_ENDPOINT_URL" && k != "AWS_TIMEOUT");
        sluice
            .env
            .push(("AWS_ENDPOINT_URL".to_owned(), self.endpoint()));
        sluice
            .env
            .push(("AWS_TIMEOUT".to_owned(), timeout.to_owned()));
    }

    /// Every forwarded request waits `delay` first (a distant store).
    pub fn set_delay(&self, delay: Duration) {
        self.state.lock().unwrap().delay = delay;
    }

    /// Forgets the exchanges so far.
    pub fn clear_log(&self) {
        self.state.lock().unwrap().log.clear();
    }

    /// The longest chain of the exchanges so far in which each request went
    /// out after the one before it was answered: the round trips made one
    /// after another, which a store's latency multiplies.
    ///
    /// A request waited for an answer that came back just before it went
    /// out: the last one, or one within `TRIGGER_WINDOW_US` of it (the
    /// shallowest of those counts). Not for every earlier answer: of two
    /// tables' chains of requests made side by side, one table's request
    /// often goes out after the other table's next answer, and counting that
    /// as a wait would zigzag between independent chains and grow with the
    /// table count on a busy machine. A chain made one request after another
    /// still counts in full: each request follows its predecessor's answer
    /// closely, and no other answer comes back in between.
    pub fn sequential_round_trips(&self) -> usize {
        let log: Vec<Exchange> = self
            .exchanges()
            .into_iter()
            .filter(|e| e.sent > 0)
            .collect();
        // Every send and answer on the one clock, in order.
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, e) in log.iter().enumerate() {
            events.push((e.sent, false, i));
            if e.answered > 0 {
                events.push((e.answered, true, i));
            }
        }
        events.sort();
        let mut depth = vec![0usize; log.len()];
        let mut answers: Vec<usize> = Vec::new();
        for (_, answer, i) in events {
            if answer {
                answers.push(i);
                continue;
            }
            let waited_for = answers.last().map(|&last| {
                let since = log[last].answered_us.saturating_sub(TRIGGER_WINDOW_US);
                answers
                    .iter()
                    .rev()
                    .take_while(|&&j| log[j].answered_us >= since)
                    .map(|&j| depth[j])
                    .min()
                    .unwrap_or(0)
            });
            depth[i] = waited_for.unwrap_or(0) + 1;
        }
        depth.into_iter().max().unwrap_or(0)
    }

    /// Every request passes from now on.
    pub fn pass(&self) {
        self.set_rules(Vec::new());
    }

    /// Every exchange so far, in the order the requests arrived.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.state.lock().unwrap().log.clone()
    }

    /// How many requests got `fault` so far.
    pub fn hits(&self, fault: Fault) -> usize {
        self.exchanges()
            .iter()
            .filter(|e| e.fault == Some(fault))
            .count()
    }
}

impl State {
    fn decide(&mut self, method: &str, path: &str) -> Option<Fault> {
        for rule in &mut self.rules {
            if !(rule.method.is_empty() || rule.method == method)
                || !path.contains(rule.path_contains)
            {
                continue;
            }
            let i = rule.seen;
            rule.seen += 1;
            if i % rule.period < rule.burst && rule.hits < rule.limit {
                rule.hits += 1;
                return Some(rule.fault);
            }
        }
        None
    }
}

/// The S3 error code a status stands for.
fn s3_code(status: u16) -> &'static str {
    match status {
        403 => "AccessDenied",
        404 => "NoSuchBucket",
        429 | 503 => "SlowDown",
        500 => "InternalError",
        _ => "InjectedFault",
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Injected",
    }
}

async fn serve(mut client: TcpStream, upstream: u16, state: Arc<Mutex<State>>) {
    let Some(request) = read_message(&mut client).await else {
        return;
    };
    let head = String::from_utf8_lossy(&request[..head_len(&request)]).into_owned();
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or("").to_owned();
    let target = words.next().unwrap_or("").to_owned();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_owned(), q.to_owned()),
        None => (target.clone(), String::new()),
    };
    let deletes = if method == "POST" && query.contains("delete") {
        String::from_utf8_lossy(&request[head_len(&request)..])
            .split("<Key>")
            .skip(1)
            .filter_map(|k| k.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect()
    } else {
        Vec::new()
    };
    let (fault, index) = {
        let mut s = state.lock().unwrap();
        let fault = s.decide(&method, &path);
        s.log.push(Exchange {
            method,
            path,
            query,
            deletes,
            fault,
            status: None,
            sent: 0,
            answered: 0,
            answered_us: 0,
        });
        (fault, s.log.len() - 1)
    };
    if let Some(Fault::Status(status)) = fault {
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>injected by the test proxy</Message></Error>",
            s3_code(status)
        );
        let answer = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            reason(status),
            body.len()
        );
        let _ = client.write_all(answer.as_bytes()).await;
        let _ = client.shutdown().await;
        return;
    }
    let sent = tick();
    let delay = {
        let mut s = state.lock().unwrap();
        s.log[index].sent = sent;
        s.delay
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let answer = forward(upstream, &request).await;
    let answered = tick();
    let answered_us = micros();
    if let Some(answer) = &answer {
        let status = String::from_utf8_lossy(&answer[..head_len(answer).min(64)])
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok());
        let mut s = state.lock().unwrap();
        s.log[index].status = status;
        s.log[index].answered = answered;
        s.log[index].answered_us = answered_us;
    }
    match fault {
        Some(Fault::Drop) => {}
        Some(Fault::Garbage) => {
            let _ = client
                .write_all(b"\x00\x01 not an HTTP answer\r\n\r\n")
                .await;
            let _ = client.shutdown().await;
        }
        Some(Fault::Stall(d)) => tokio::time::sleep(d).await,
        Some(Fault::Status(_)) | None => {
            if let Some(answer) = answer {
                let _ = client.write_all(&with_connection_close(&answer)).await;
                let _ = client.shutdown().await;
            }
        }
    }
}

/// Sends `request` to the store on a connection of its own and reads the
/// whole answer (the store closes after it: `Connection: close`).
async fn forward(upstream: u16, request: &[u8]) -> Option<Vec<u8>> {
    let mut store = TcpStream::connect(("127.0.0.1", upstream)).await.ok()?;
    store
        .write_all(&with_connection_close(request))
        .await
        .ok()?;
    let mut answer = Vec::new();
    store.read_to_end(&mut answer).await.ok()?;
    (!answer.is_empty()).then_some(answer)
}

/// Length of the head (through the blank line), or of the whole message.
fn head_len(message: &[u8]) -> usize {
    message
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(message.len(), |p| p + 4)
}

/// The message with its `Connection` header replaced by `Connection: close`.
fn with_connection_close(message: &[u8]) -> Vec<u8> {
    let head_end = head_len(message);
    let head = String::from_utf8_lossy(&message[..head_end]);
    let mut out = String::new();
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        let name = line.split(':').next().unwrap_or("").to_ascii_lowercase();
        if name == "connection" || name == "keep-alive" {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&message[head_end..]);
    bytes
}

/// Reads one HTTP/1.1 request (head and a `Content-Length` or chunked body).
async fn read_message(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let end = head_len(&buf);
        if end < buf.len() || buf.ends_with(b"\r\n\r\n") {
            break end;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        // Complete once the zero-size chunk and the blank line after it are in.
        while !chunked_complete(&buf[head_end..]) {
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Some(buf);
    }
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf)
}

/// Whether a chunked body is complete (its last chunk and trailer are in).
fn chunked_complete(mut body: &[u8]) -> bool {
    loop {
        let Some(line_end) = body.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let Ok(size) = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
        else {
            return false;
        };
        body = &body[line_end + 2..];
        if size == 0 {
            return body.windows(2).any(|w| w == b"\r\n");
        }
        if body.len() < size + 2 {
            return false;
        }
        body = &body[size + 2..];
    }
}
